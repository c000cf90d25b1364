"""The hami-control-leader Service, for hami-control replicas run as processes: a TCP proxy
that forwards each new connection to the replica whose pod carries the Service's selector
(deploy/'s `hami.io/control-leader: "true"`), as kube-proxy would. Without kubelets running
the replicas, their pods are placeholders (never scheduled) that each replica labels; `backends`
maps pod name -> the replica's host:port. A labelled replica that refuses the connection is
skipped, as a dead pod's endpoint stops being ready. TLS passes through untouched.

    proxy = LeaderProxy(core_v1, "hami-system", selector, {"hami-control-a": ("127.0.0.1", p)},
                        ("127.0.0.1", port)).start()
"""
from __future__ import annotations

import socket
import threading
from typing import Optional

from hami_sim.realcluster.svcproxy import pump


def label_selector(selector: dict) -> str:
    """A Service's spec.selector as a label selector string."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


class LeaderProxy:
    """Listens on address; forwards to the labelled replica (see the module's doc)."""

    def __init__(self, core_v1, namespace: str, selector: dict, backends: dict,
                 address: tuple):
        self.v1, self.namespace, self.selector = core_v1, namespace, label_selector(selector)
        self.backends = dict(backends)
        self._sock = socket.create_server(address, reuse_port=False)
        self._sock.settimeout(0.2)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="leader-proxy")
        self.forwarded: dict = {}          # pod name -> connections forwarded to it

    def start(self) -> "LeaderProxy":
        """Accepts in a thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops accepting (forwarded connections end with their peers)."""
        self._stopped.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def selected(self) -> list:
        """The pods the Service selects now (names)."""
        pods = self.v1.list_namespaced_pod(self.namespace, label_selector=self.selector)
        return [p.metadata.name for p in pods.items]

    def _connect(self) -> Optional[socket.socket]:
        for name in self.selected():
            backend = self.backends.get(name)
            if backend is None:
                continue
            try:
                upstream = socket.create_connection(backend, timeout=2)
            except OSError:
                continue                  # a dead replica's endpoint is not ready
            self.forwarded[name] = self.forwarded.get(name, 0) + 1
            return upstream
        return None

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = self._connect()
        except Exception:      # noqa: BLE001  (the API server unreachable: drop the client)
            upstream = None
        if upstream is None:
            client.close()
            return
        upstream.settimeout(None)
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)
