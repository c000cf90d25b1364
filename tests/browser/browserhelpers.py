"""Headless Chromium for the browser tier, driven over the W3C WebDriver protocol that
Debian's chromium-driver speaks (plain HTTP + JSON: no client library to pin).

    with Browser.start() as b:
        b.get(url); b.wait_js("return document.title") ; b.screenshot(path)
"""
from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
ARTIFACTS = Path(os.environ.get("HAMI_TEST_ARTIFACTS") or REPO / "test-artifacts")
CHROMIUM = ("/usr/bin/chromium", "/usr/lib/chromium/chromium")
# The demo's pods, kept running (the examples end in seconds; a finished pod leaves the view).
LONG_RUN = ["python3", "-m", "hami_sim.demo.workloads", "compute", "--seconds", "600",
            "--kernel-ms", "20", "--in-flight", "1", "--hold-mib", "128"]
INSTALL_HINT = "run `make test` (or `bash tools/browser/install.sh` as root) to install them"


class BrowserError(RuntimeError):
    """WebDriver answered an error or the browser did not start."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binaries() -> tuple:
    driver = shutil.which("chromedriver")
    chromium = next((p for p in CHROMIUM if os.path.exists(p)), None)
    if not driver or not chromium:
        raise BrowserError(f"chromium and chromium-driver (Debian packages) are missing: "
                           f"{INSTALL_HINT}")
    return driver, chromium


class Browser:
    """One chromedriver process and one headless Chromium session."""

    def __init__(self, driver: subprocess.Popen, base: str, session: str):
        self.driver, self.base, self.session = driver, base, session

    @classmethod
    def start(cls, width: int = 1440, height: int = 900) -> "Browser":
        """Starts chromedriver and a headless session."""
        driver_bin, chromium = _binaries()
        port = _free_port()
        proc = subprocess.Popen([driver_bin, f"--port={port}"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                _call("GET", f"{base}/status")
                break
            except (OSError, BrowserError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    proc.kill()
                    raise BrowserError(f"chromedriver did not answer on {base}")
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", f"--window-size={width},{height}"]}}}}
        try:
            session = _call("POST", f"{base}/session", caps)["sessionId"]
        except BaseException:
            proc.kill()
            raise
        return cls(proc, base, session)

    def _cmd(self, method: str, path: str, body=None):
        return _call(method, f"{self.base}/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        """Navigates (returns once the page loaded)."""
        self._cmd("POST", "/url", {"url": url})

    def js(self, script: str, *args):
        """Runs a script (a function body: `return ...`) in the page."""
        return self._cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait_js(self, script: str, *args, timeout: float = 10.0, poll: float = 0.05):
        """Polls a script until it returns something truthy; that value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(script, *args)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"still false after {timeout} s: {script}")
            time.sleep(poll)

    def type_into(self, css: str, text: str) -> None:
        """Types text into the element (real key events)."""
        found = self._cmd("POST", "/element", {"using": "css selector", "value": css})
        element = next(iter(found.values()))
        self._cmd("POST", f"/element/{element}/clear", {})
        self._cmd("POST", f"/element/{element}/value", {"text": text})

    def screenshot(self, path: Path) -> Path:
        """Saves a PNG of the window."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self._cmd("GET", "/screenshot")))
        return path

    def quit(self) -> None:
        """Ends the session and chromedriver (and its Chromium)."""
        try:
            self._cmd("DELETE", "")
        except (OSError, BrowserError):
            pass
        self.driver.terminate()
        try:
            self.driver.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.driver.kill()

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.quit()


def _call(method: str, url: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:1000]
        raise BrowserError(f"WebDriver {method} {url}: {e.code} {detail}") from e
    return answer.get("value")


def long_running(pod: dict) -> dict:
    """The pod with every container's command replaced by a 10-minute light compute loop."""
    pod = copy.deepcopy(pod)
    for ctr in pod["spec"]["containers"]:
        ctr["command"] = list(LONG_RUN)
    return pod


def wait_bound(v1, namespace: str, name: str, timeout: float = 30.0) -> dict:
    """The pod once the API server says it is bound (as a dict). The admission loop deletes a
    pod the webhook mutates and creates it again: a moment of 404 is expected."""
    import json
    from kubernetes.client.exceptions import ApiException
    deadline = time.monotonic() + timeout
    pod = {}
    while True:
        try:
            pod = json.loads(v1.read_namespaced_pod(name, namespace,
                                                    _preload_content=False).data)
        except ApiException as e:
            if e.status != 404:
                raise
        if (pod.get("spec") or {}).get("nodeName"):
            return pod
        if time.monotonic() > deadline:
            raise AssertionError(f"{namespace}/{name} not bound after {timeout} s: "
                                 f"{pod.get('status')}")
        time.sleep(0.05)
