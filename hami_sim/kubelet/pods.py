"""The kubelet double's view of the pods bound to its node, kept by list + watch through the
official client (relist on 410 or a broken stream)."""
from __future__ import annotations

import json
import threading
import time
from typing import Callable

from kubernetes import watch
from kubernetes.client.rest import ApiException


class PodWatcher:
    """pods: uid -> pod dict for every pod with spec.nodeName == node."""

    def __init__(self, core_v1, node_name: str, on_change: Callable[[], None],
                 log: Callable[[str], None], watch_timeout: int = 30):
        self._v1 = core_v1
        self._selector = f"spec.nodeName={node_name}"
        self._on_change = on_change
        self._log = log
        self._timeout = watch_timeout
        self.pods: dict[str, dict] = {}
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="kubelet-pods")

    def start(self) -> "PodWatcher":
        """Starts listing and watching."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the watch and waits for the thread."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(timeout=10)

    def _list(self) -> str:
        resp = self._v1.list_pod_for_all_namespaces(field_selector=self._selector,
                                                    _preload_content=False)
        data = json.loads(resp.data)
        self.pods = {p["metadata"]["uid"]: p for p in data["items"]}
        self.synced.set()
        self._on_change()
        return data["metadata"]["resourceVersion"]

    def _run(self) -> None:
        backoff, rv = 0.2, None
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                rv = self._follow(rv)
                backoff = 0.2
            except ApiException as e:
                if e.status != 410:
                    self._log(f"pod watch failed ({e.status} {e.reason}); relisting")
                rv = None
            except Exception as e:  # noqa: BLE001 any transport error: relist after a pause
                if self._stop.is_set():
                    return
                self._log(f"pod watch broken ({type(e).__name__}: {e}); relisting")
                rv = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _follow(self, rv: str) -> str:
        self._watch = w = watch.Watch()
        for event in w.stream(self._v1.list_pod_for_all_namespaces,
                              field_selector=self._selector, resource_version=rv,
                              timeout_seconds=self._timeout, allow_watch_bookmarks=True):
            if self._stop.is_set():
                w.stop()
                break
            obj = event["raw_object"]
            rv = obj.get("metadata", {}).get("resourceVersion", rv)
            if event["type"] == "BOOKMARK":
                continue
            uid = obj["metadata"]["uid"]
            if event["type"] == "DELETED":
                self.pods.pop(uid, None)
            else:
                self.pods[uid] = obj
            self._on_change()
        return rv


def wait_until(cond: threading.Condition, predicate: Callable, timeout: float, what: str):
    """Waits on cond for predicate() to be truthy; returns its value or raises TimeoutError."""
    deadline = time.monotonic() + timeout
    with cond:
        while True:
            value = predicate()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
            cond.wait(min(left, 0.5))
