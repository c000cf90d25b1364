"""The dashboard in a real browser against `hami-sim cluster up`: the demo's pods on the GPUs
their annotations name, a pending pod with its reason, live updates (a new pod, an XID that
makes a GPU Unhealthy) without a reload, the search, and a screenshot (test-artifacts/).
On the same running cluster: deploy/grafana/'s queries name only metrics that hami-control
and hami-node really export."""
from __future__ import annotations

import json
import subprocess
import sys
import time

from hami_common import constants as C
from hami_common import pod_devices
from hami_sim.demo.cluster import DEFAULT_NODES
from hami_sim.demo.examples import load_examples
from hami_sim.gpu import sim_env

from browserhelpers import ARTIFACTS, EXAMPLES, long_running, wait_bound
from promql import DASHBOARDS, exported_names, metric_names, queries, scrape

LIVE_S = 2.0        # the budget from a change to the page showing it

SEGMENT = "return !!document.querySelector(`.row[data-uuid='${arguments[0]}'] " \
          "i[data-pod='${arguments[1]}']`)"


def _gpus_of(pod: dict) -> set:
    value = pod["metadata"]["annotations"][C.ANNO_DEVICES_ALLOCATED]
    return {d.uuid for ctr in pod_devices.decode(value) for d in ctr}


def _submit_examples(v1) -> tuple:
    placed, refused = [], []
    for ex in load_examples(EXAMPLES):
        v1.create_namespaced_pod(ex.namespace, long_running(ex.pod))
        (refused if ex.expectation.outcome == "pending" else placed).append(ex)
    return placed, refused


def _page_is_live(browser) -> int:
    return browser.js("return window.hamiDash && window.hamiDash.updates")


def test_demo_pods_on_their_gpus_live_updates_search_and_screenshot(cluster, browser):
    browser.get(cluster.url)
    browser.wait_js("return window.hamiDash.firstPaint !== null")
    browser.js("window.__sameDocument = true")
    placed, refused = _submit_examples(cluster.v1)
    truth = {}
    for ex in placed:
        pod = wait_bound(cluster.v1, ex.namespace, ex.name)
        truth[f"{ex.namespace}/{ex.name}"] = _gpus_of(pod)
    for key, uuids in truth.items():            # each pod drawn on exactly its GPUs
        for uuid in uuids:
            browser.wait_js(SEGMENT, uuid, key, timeout=LIVE_S + 1)
        drawn = browser.js("return [...document.querySelectorAll(`i[data-pod='${arguments[0]}']`)]"
                           ".map(e => e.closest('.row').dataset.uuid)", key)
        assert set(drawn) == uuids, (key, drawn, uuids)
    for ex in refused:                          # pending, with the extender's reason
        key = f"{ex.namespace}/{ex.name}"
        reason = browser.wait_js("const li = document.querySelector(`#pending li[data-pod="
                                 "'${arguments[0]}']`); return li && li.textContent", key,
                                 timeout=30)
        assert ex.expectation.reason in reason, reason
    _measured_use_shown(cluster, browser, next(iter(truth)))
    browser.screenshot(ARTIFACTS / "dashboard.png")

    _pod_added_shows_within_budget(cluster, browser)
    _xid_marks_gpu_unhealthy_within_budget(cluster, browser)
    _search_finds_a_pod(browser, next(iter(truth)), truth)
    assert browser.js("return window.__sameDocument === true"), "the page reloaded"


def _measured_use_shown(cluster, browser, key: str) -> None:
    """The pod's measured memory in use and compute share (scraped from its node agent) in
    its detail: its workload holds LONG_RUN's 128 MiB plus its context."""
    browser.js("document.querySelector(`#pods li[data-pod='${arguments[0]}']`).click()", key)
    cells = browser.wait_js("const r = document.querySelector('#detail tr.use');"
                            "return r && [...r.cells].map(c => c.textContent)", timeout=20)
    assert browser.js("return document.getElementById('detail-key').textContent") == key
    in_use = int(cells[1].split()[0])
    assert 128 <= in_use < 4096, cells


def _pod_added_shows_within_budget(cluster, browser) -> None:
    before = _page_is_live(browser)
    ex = next(e for e in load_examples(EXAMPLES) if e.source.name.startswith("02-"))
    pod = long_running(ex.pod)
    pod["metadata"] = {"name": "added-later", "namespace": ex.namespace}
    cluster.v1.create_namespaced_pod(ex.namespace, pod)
    bound = wait_bound(cluster.v1, ex.namespace, "added-later")
    seen_bound = time.monotonic()
    for uuid in _gpus_of(bound):
        browser.wait_js(SEGMENT, uuid, f"{ex.namespace}/added-later", timeout=10, poll=0.02)
    delay = time.monotonic() - seen_bound
    print(f"new pod on the page {delay:.2f} s after the API server had it bound")
    assert delay < LIVE_S, f"the page showed the new pod {delay:.2f} s after it was bound"
    assert _page_is_live(browser) > before


def _xid_marks_gpu_unhealthy_within_budget(cluster, browser) -> None:
    spec = next(n for n in DEFAULT_NODES if n.name == "node-b")
    env = sim_env(gpus=spec.sim_gpus, state_dir=cluster.workdir / spec.name / "gpu-state",
                  uuid_seed=spec.name)
    uuid = browser.js("return document.querySelector(\".row[data-node='node-b'][data-uuid]\")"
                      ".dataset.uuid")
    index = browser.js("return document.querySelector(`.row[data-uuid='${arguments[0]}']`)"
                       ".textContent.match(/GPU (\\d+)/)[1]", uuid)
    subprocess.run([sys.executable, "-m", "hami_sim.cli", "inject-xid", index, "79"],
                   env=env, check=True, capture_output=True, timeout=30)
    injected = time.monotonic()
    row = browser.wait_js("const r = document.querySelector(`.row[data-uuid='${arguments[0]}']`);"
                          "return r && r.dataset.health === 'Unhealthy' && "
                          "r.textContent.includes('XID 79') && r.textContent", uuid,
                          timeout=15, poll=0.02)
    delay = time.monotonic() - injected
    print(f"XID 79 -> Unhealthy on the page in {delay:.2f} s")
    # From the XID to the page: the agent's verdict (its metrics, scraped each second) and its
    # register annotation (through hami-control's watch), then the page's next poll.
    assert delay < LIVE_S + 1.0, f"Unhealthy shown {delay:.2f} s after the XID: {row}"
    events = browser.wait_js("const t = document.getElementById('events').textContent;"
                             "return t.includes('Unhealthy') && t.includes('XID 79') && t")
    assert uuid in events


def _search_finds_a_pod(browser, key: str, truth: dict) -> None:
    name = key.split("/", 1)[1]
    browser.type_into("#search", name)
    browser.wait_js("return document.querySelectorAll('#pods li').length === "
                    "[...document.querySelectorAll('#pods li')].filter(li => "
                    "li.dataset.pod.includes(arguments[0])).length && "
                    "document.querySelector(`#pods li[data-pod='${arguments[1]}']`)", name, key)
    hits = browser.js("return [...document.querySelectorAll('i.hit')].map(e => e.dataset.pod)")
    assert hits and all(name in h for h in hits), hits
    shown = browser.js("return [...document.querySelectorAll('.row[data-uuid]')]"
                       ".map(r => r.dataset.uuid)")
    assert truth[key] <= set(shown)
    browser.type_into("#search", "")


def test_metric_names_parse_out_of_promql():
    assert metric_names('sum by (le) (rate(a_b_bucket{x="y(z)"}[5m])) / on (ns) group_left '
                        'c:d * 100 or vector(0)') == {"a_b_bucket", "c:d"}


def test_every_grafana_query_names_an_exported_metric(cluster):
    assert DASHBOARDS, "no dashboard in deploy/grafana"
    exported = exported_names(scrape(cluster))
    assert {"GPUDeviceMemoryAllocated", "HostGPUMemoryUsage"} <= exported   # both scraped
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        exprs = queries(dashboard)
        assert len(exprs) >= 10, path
        for expr in exprs:
            names = metric_names(expr)
            assert names, f"{path.name}: no metric in {expr!r}"
            missing = names - exported
            assert not missing, f"{path.name}: {expr!r} reads {sorted(missing)}, which no " \
                                "component exports"
