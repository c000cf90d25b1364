"""The API server double as a Python object: start it in a thread, get its URL, stop it.

    server = ApiServer(port=0).start()
    ... kubernetes client against server.url ...
    server.stop()
"""
from __future__ import annotations

import json
import os
import platform
import socket
import ssl
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

from . import discovery
from .api import Api, dumps
from .errors import ApiError, bad_request, method_not_allowed
from .faults import FaultConfigError, Faults
from .handler import Handler
from .resources import RESOURCES, by_kind, lookup
from .routes import Target
from .store import Store

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public")
NODES = lookup("", "v1", "nodes")
NAMESPACES = lookup("", "v1", "namespaces")


class StateFileError(RuntimeError):
    """The state file cannot be read or written."""


class App:
    """Everything a request handler needs: store, verbs, faults and options."""

    def __init__(self, store: Store, faults: Faults, max_body: int, watch_timeout: float,
                 bookmark_interval: float, log=None):
        self.store = store
        self.api = Api(store)
        self.faults = faults
        self.max_body = max_body
        self.watch_timeout = watch_timeout
        self.bookmark_interval = bookmark_interval
        self.connections: set = set()
        self.address = ""
        self._log = log or (lambda msg: print(f"hami-sim apiserver: {msg}", file=sys.stderr))

    def log(self, message: str) -> None:
        """One diagnostic line."""
        self._log(message)

    def perform(self, verb: str, target: Target, query: dict, body,
                content_type: str) -> tuple[int, bytes]:
        """Runs one (non-watch) verb on a target."""
        api, res, ns = self.api, target.res, target.namespace
        if res is None or target.sub == "binding":
            if verb != "create":
                raise method_not_allowed()
            return api.bind(ns, target.name or None, body)
        if verb == "get":
            return api.get(res, ns, target.name)
        if verb == "list":
            return api.list(res, ns, query)
        if verb == "create" and not target.name:
            return api.create(res, ns, body)
        if verb == "update" and target.name:
            return api.update(res, ns, target.name, target.sub, body)
        if verb == "patch" and target.name:
            return api.patch(res, ns, target.name, target.sub, content_type, body)
        if verb == "delete" and not target.sub:
            return api.delete(res, ns, target.name, body)
        if verb == "deletecollection":
            return api.delete_collection(res, ns, query)
        raise method_not_allowed()

    def admin(self, method: str, path: str, body) -> tuple[int, bytes]:
        """/_sim/faults (GET, POST a spec, DELETE to clear) and /_sim/watches/drop (POST)."""
        if path == "/_sim/faults":
            if method == "POST":
                spec = dict(body or {})
                drop = spec.pop("drop_watches", False)
                try:
                    self.faults.update(spec)
                except FaultConfigError as e:
                    raise bad_request(f"fault spec: {e}") from e
                out = self.faults.to_dict()
                if drop:
                    out["dropped"] = self.store.close_watchers("dropped")
                return 200, dumps(out)
            if method == "DELETE":
                self.faults.clear()
            elif method != "GET":
                raise method_not_allowed()
            return 200, dumps(self.faults.to_dict())
        if path == "/_sim/watches/drop" and method == "POST":
            return 200, dumps({"dropped": self.store.close_watchers("dropped")})
        if path == "/_sim/state" and method == "GET":
            return 200, dumps(self.store.dump())
        raise ApiError(404, "NotFound", f"no admin endpoint {method} {path}; see "
                       "/_sim/faults, /_sim/watches/drop, /_sim/state")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    app: App


def node_object(name: str, cpu: str = "16", memory: str = "64Gi", pods: str = "110",
                labels: dict | None = None) -> dict:
    """A Ready node with the given capacity (and the same allocatable)."""
    capacity = {"cpu": str(cpu), "memory": str(memory), "pods": str(pods)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "kubernetes.io/os": "linux",
                                                  **(labels or {})}},
            "spec": {},
            "status": {"capacity": capacity, "allocatable": dict(capacity),
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady"}],
                       "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                     {"type": "Hostname", "address": name}],
                       "nodeInfo": node_info()}}


def node_info() -> dict:
    """status.nodeInfo of a simulated node (kubectl get nodes shows its VERSION; -o wide its
    OS image, kernel and runtime): this machine's, the double's version as the kubelet's."""
    return {"kubeletVersion": discovery.SERVER_VERSION["gitVersion"],
            "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": _ARCH.get(platform.machine(), platform.machine()),
            "osImage": _os_image(), "kernelVersion": platform.release(),
            "containerRuntimeVersion": "hami-sim://" + discovery.SERVER_VERSION["gitVersion"],
            "machineID": "", "systemUUID": "", "bootID": ""}


_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def _os_image() -> str:
    try:
        return platform.freedesktop_os_release().get("PRETTY_NAME", "Linux")
    except OSError:
        return "Linux"


class ApiServer:
    """The API server double: a threaded HTTP(S) server over an in-memory Store."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, tls_cert: str | None = None,
                 tls_key: str | None = None, state_file: str | None = None,
                 history: int = 10000, watch_queue: int = 1000, max_body: int = 3 * 1024 * 1024,
                 watch_timeout: float = 1800.0, bookmark_interval: float = 5.0,
                 faults: Faults | dict | None = None, nodes=(), log=None):
        self.store = Store(history=history, watch_queue=watch_queue)
        if isinstance(faults, dict):
            spec, faults = faults, Faults()
            faults.update(spec)
        self.faults = faults or Faults()
        self.app = App(self.store, self.faults, max_body, watch_timeout, bookmark_interval, log)
        self._host, self._port = host, port
        self._tls = (tls_cert, tls_key) if tls_cert else None
        self.state_file = Path(state_file) if state_file else None
        self._httpd: _HTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._initial_nodes = list(nodes)

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:41234."""
        if self._httpd is None:
            raise RuntimeError("the API server is not started")
        host, port = self._httpd.server_address[:2]
        scheme = "https" if self._tls else "http"
        return f"{scheme}://{host}:{port}"

    def start(self) -> "ApiServer":
        """Binds, seeds default objects (or loads the state file) and serves in a thread."""
        if self.state_file and self.state_file.exists():
            self._load_state()
        else:
            self.seed()
        httpd = _HTTPServer((self._host, self._port), Handler)
        httpd.app = self.app
        if self._tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self._tls)
            # The handshake happens in the connection's thread, never in the accept loop.
            httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True,
                                           do_handshake_on_connect=False)
        self._httpd = httpd
        self.app.address = "%s:%d" % httpd.server_address[:2]
        self._spawn(lambda: httpd.serve_forever(poll_interval=0.05), "apiserver-http")
        if self.state_file:
            self._spawn(self._save_loop, "apiserver-state")
        return self

    def _spawn(self, target, name):
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def seed(self) -> None:
        """Creates the default namespaces and the configured nodes."""
        for ns in DEFAULT_NAMESPACES:
            self._ensure(NAMESPACES, {"metadata": {"name": ns}})
        for node in self._initial_nodes:
            self.add_node(**node) if isinstance(node, dict) else self.add_node(node)

    def _ensure(self, res, obj) -> None:
        try:
            self.app.api.create(res, None, obj)
        except ApiError as e:
            if e.code != 409:
                raise

    def add_node(self, name: str, cpu: str = "16", memory: str = "64Gi", pods: str = "110",
                 labels: dict | None = None) -> dict:
        """Creates a Ready node (no-op if it exists); returns the stored object."""
        self._ensure(NODES, node_object(name, cpu, memory, pods, labels))
        return self.store.get(NODES.key, "", name).obj

    def stop(self) -> None:
        """Closes watches and connections, stops serving, saves the state file."""
        self._stopping.set()
        self.store.close_watchers("shutdown")
        if self._httpd is not None:
            self._httpd.shutdown()
            for conn in list(self.app.connections):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed by its peer
            self._httpd.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.state_file:
            self.save_state()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def save_state(self) -> None:
        """Writes every object to the state file atomically."""
        data = self.store.dump()
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        try:
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.state_file)
        except OSError as e:
            raise StateFileError(f"cannot write state file {self.state_file}: {e}") from e

    def _save_loop(self) -> None:
        while not self._stopping.is_set():
            if self.store.dirty.wait(0.5) and not self._stopping.is_set():
                self.store.dirty.clear()
                self.save_state()
                time.sleep(0.5)  # at most two writes a second under load

    def _load_state(self) -> None:
        try:
            data = json.loads(self.state_file.read_text())
            entries = []
            for obj in data["objects"]:
                res = by_kind(obj["kind"], obj["apiVersion"])
                if res is None:
                    raise ValueError(f"unknown kind {obj['kind']} {obj['apiVersion']}")
                meta = obj["metadata"]
                entries.append((res.key, meta.get("namespace", "") if res.namespaced else "",
                                meta["name"], obj))
            self.store.load(entries, int(data.get("resourceVersion", 0)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise StateFileError(f"state file {self.state_file} is unreadable: {e}; "
                                 "delete it to start empty") from e


__all__ = ["ApiServer", "App", "node_object", "StateFileError", "RESOURCES"]
