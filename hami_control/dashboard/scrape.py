"""Measured use, scraped from the node agents' /metrics (HAMi's names, hami_node/plugin/
metrics.py): per container and GPU the memory in use and the compute share achieved, per GPU
the agent's health verdict and the XIDs it counted.

Where an agent serves is given by --dashboard-node-metrics: a URL template with {node} and
{agent_ip} (the hami-node pod's IP, from the pod watch), or @FILE, a JSON object node -> URL
(read again when it changes; the simulated cluster writes one). One scrape round visits every
node with a small thread pool and a short timeout, so a dead agent costs one timeout, never a
stuck dashboard."""
import json
import logging
import os
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)
TIMEOUT_S = 2.0
WORKERS = 8


class UrlBook:
    """node -> its agent's /metrics URL, from a template or a JSON file."""

    def __init__(self, spec: str, agent_ip: Callable[[str], Optional[str]]):
        self.spec, self.agent_ip = spec, agent_ip
        self._file_stamp, self._file_urls = None, {}

    def url(self, node: str) -> Optional[str]:
        """The URL to scrape for that node, None when unknown."""
        if not self.spec:
            return None
        if self.spec.startswith("@"):
            return self._from_file().get(node)
        if "{agent_ip}" in self.spec:
            ip = self.agent_ip(node)
            if not ip:
                return None
            return self.spec.replace("{agent_ip}", ip).replace("{node}", node)
        return self.spec.replace("{node}", node)

    def _from_file(self) -> dict:
        path = self.spec[1:]
        try:
            st = os.stat(path)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp != self._file_stamp:
                with open(path) as f:
                    urls = json.load(f)
                if not isinstance(urls, dict):
                    raise ValueError("not a JSON object node -> URL")
                self._file_urls, self._file_stamp = {str(k): str(v) for k, v in urls.items()}, \
                    stamp
        except (OSError, ValueError) as e:
            log.warning("dashboard: cannot read the node metrics file %s: %s", path, e)
        return self._file_urls


def parse(text: str) -> dict:
    """The figures the dashboard shows, from one agent's exposition:
    {"containers": {(ns, pod, ctr, uuid): {"mem": bytes, "share": percent}},
     "gpus": {uuid: {"healthy": bool, "mem": bytes, "util": percent, "xids": [xid, ...]}}}."""
    ctrs, gpus = {}, {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            lab = s.labels
            if family.name in ("vGPU_device_memory_usage_in_bytes",
                               "Device_utilization_desc_of_container"):
                key = (lab.get("podnamespace", ""), lab.get("podname", ""),
                       lab.get("ctrname", ""), lab.get("deviceuuid", ""))
                field = "mem" if family.name.startswith("vGPU") else "share"
                ctrs.setdefault(key, {})[field] = s.value
            elif family.name in ("HostGPUMemoryUsage", "HostCoreUtilization",
                                 "hami_node_gpu_healthy"):
                gpu = gpus.setdefault(lab.get("deviceuuid", ""), {"xids": []})
                field = {"HostGPUMemoryUsage": "mem", "HostCoreUtilization": "util"}.get(
                    family.name, "healthy")
                gpu[field] = bool(s.value) if field == "healthy" else s.value
            elif family.name == "hami_node_xid_events" and s.name.endswith("_total") \
                    and s.value > 0 and lab.get("critical") == "true":
                gpu = gpus.setdefault(lab.get("deviceuuid", ""), {"xids": []})
                gpu["xids"].append(int(lab.get("xid", "0")))
    return {"containers": ctrs, "gpus": gpus}


def fetch(url: str) -> str:
    """One scrape."""
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
        return resp.read().decode("utf-8", "replace")


class Scraper:
    """Scrapes every node's agent each period in a thread; `latest()` is the last round."""

    def __init__(self, urls: UrlBook, nodes: Callable[[], list], period_s: float,
                 on_round: Callable[[], None] = lambda: None, get: Callable = fetch):
        self.urls, self.nodes, self.period_s, self.on_round = urls, nodes, period_s, on_round
        self.get = get
        self._latest: dict = {}         # node -> parse() result or {"error": text}
        self.rounds = 0                 # scrape rounds done (the snapshot's fingerprint)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dashboard-scrape", daemon=True)

    def start(self) -> "Scraper":
        """Scrapes in a thread."""
        if self.urls.spec:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stops after the current round."""
        self._stop.set()

    def latest(self) -> dict:
        """node -> its last scrape (parsed, or {"error": ...})."""
        with self._lock:
            return dict(self._latest)

    def _loop(self) -> None:
        with ThreadPoolExecutor(WORKERS, thread_name_prefix="dashboard-scrape") as pool:
            while not self._stop.is_set():
                self.scrape_round(pool)
                self._stop.wait(self.period_s)

    def scrape_round(self, pool) -> None:
        """Scrapes every node once (nodes without a URL are left out)."""
        targets = [(n, self.urls.url(n)) for n in self.nodes()]
        targets = [(n, u) for n, u in targets if u]
        results = dict(zip([n for n, _ in targets], pool.map(self._one, [u for _, u in targets])))
        with self._lock:
            self._latest = results
            self.rounds += 1
        self.on_round()

    def _one(self, url: str) -> dict:
        try:
            return parse(self.get(url))
        except (OSError, ValueError) as e:
            return {"error": f"{url}: {e}"}
