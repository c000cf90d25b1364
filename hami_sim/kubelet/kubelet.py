"""The kubelet double: Registration on kubelet.sock, device plugins followed, and the device
manager's work for every pod bound to its node.

    kubelet = KubeletDouble("node-a", plugin_dir, api_client=client).start()
    kubelet.wait_allocated("default", "pod-1")
    kubelet.restart()      # sockets removed, a fresh kubelet.sock served
    kubelet.stop()
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from hami_common import constants as C
from hami_sim.apiserver.server import node_object

from .devices import AllocationError, DeviceManager
from .pods import PodWatcher, wait_until
from .records import AllocationFailure, ContainerAllocation, RecordDir
from .registration import RegistrationServer
from .status import StatusWriter



class KubeletDouble:
    """One node's kubelet, as far as device plugins and pod admission go."""

    def __init__(self, node_name: str, plugin_dir, api_client=None, *, kubeconfig=None,
                 record_dir=None, sync_interval: float = 1.0, retry_base: float = 1.0,
                 retry_max: float = 30.0, node_cpu: str = "16", node_memory: str = "64Gi",
                 log=None):
        if api_client is None:
            if kubeconfig is None:
                raise ValueError("KubeletDouble needs api_client or kubeconfig")
            from hami_sim.kubeconfig import api_client_from_kubeconfig
            api_client = api_client_from_kubeconfig(kubeconfig)
        self.node_name = node_name
        self.plugin_dir = str(plugin_dir)
        self.v1 = client.CoreV1Api(api_client)
        self.records = RecordDir(record_dir)
        self.sync_interval, self.retry_base, self.retry_max = sync_interval, retry_base, retry_max
        self._node_capacity = (node_cpu, node_memory)
        self._log_fn = log or (lambda m: print(f"kubelet[{node_name}]: {m}", file=sys.stderr))
        self._wake = threading.Event()
        self.devices = DeviceManager(self.plugin_dir, lambda _res: self._wake.set())
        self.status = StatusWriter(self.v1, node_name, self.log)
        self.pods = PodWatcher(self.v1, node_name, self._wake.set, self.log)
        self._registration: RegistrationServer | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._admitted: dict[str, list[ContainerAllocation]] = {}  # pod uid -> containers
        self._failures: dict[str, AllocationFailure] = {}  # pod uid -> last failure
        self._retry_at: dict[str, float] = {}
        self.registrations = 0
        self._thread = threading.Thread(target=self._loop, daemon=True, name="kubelet-sync")

    def log(self, message: str) -> None:
        """One diagnostic line."""
        self._log_fn(message)

    # Life cycle -------------------------------------------------------------------------

    def start(self) -> "KubeletDouble":
        """Registers the node if needed, serves kubelet.sock, watches pods, syncs."""
        os.makedirs(self.plugin_dir, exist_ok=True)
        self._ensure_node()
        self._serve_registration()
        self.pods.start()
        self._thread.start()
        return self

    def _ensure_node(self) -> None:
        try:
            self.v1.read_node(self.node_name)
        except ApiException as e:
            if e.status != 404:
                raise
            cpu, memory = self._node_capacity
            try:
                self.v1.create_node(node_object(self.node_name, cpu, memory))
            except ApiException as e2:
                if e2.status != 409:  # someone else registered it meanwhile
                    raise

    def _serve_registration(self) -> None:
        self._registration = RegistrationServer(self.plugin_dir, self._on_register).start()

    def _on_register(self, request) -> None:
        self.log(f"plugin registered: {request.resource_name} at {request.endpoint}")
        self.devices.register(request)
        with self._cond:
            self.registrations += 1
            self._cond.notify_all()
        self._wake.set()

    def stop(self) -> None:
        """Stops everything this kubelet started and removes kubelet.sock."""
        self._stop.set()
        self._wake.set()
        self.pods.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self._registration:
            self._registration.stop()
            Path(self._registration.socket_path).unlink(missing_ok=True)
        self.devices.disconnect_all()

    def restart(self) -> None:
        """What a kubelet restart looks like to plugins: connections dropped, every socket
        (every non-directory file) in the plugin directory removed, a fresh kubelet.sock.
        Allocations survive, as kubelet's checkpoint keeps them."""
        self.log("restarting: removing the sockets in " + self.plugin_dir)
        if self._registration:
            self._registration.stop()
        self.devices.disconnect_all()
        for entry in os.scandir(self.plugin_dir):
            if not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.path)
        self._wake.set()
        self._serve_registration()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # The sync loop ----------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.sync_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.status.node_devices(self.devices.counts())
                self._sync_pods()
            except Exception as e:  # noqa: BLE001 one bad sync must not stop the kubelet
                self.log(f"sync failed: {type(e).__name__}: {e}")
            with self._cond:
                self._cond.notify_all()

    def _sync_pods(self) -> None:
        pods = dict(self.pods.pods)
        for uid in list(self._admitted):
            pod = pods.get(uid)
            if pod is None or pod.get("status", {}).get("phase") in C.POD_FINISHED_PHASES:
                if self.devices.release(uid):
                    self.log(f"freed the devices of pod uid {uid}")
                self._admitted.pop(uid)
        for uid in list(self._failures):
            if uid not in pods:
                self._failures.pop(uid)
                self._retry_at.pop(uid, None)
        now = time.monotonic()
        for uid, pod in sorted(pods.items(), key=lambda kv: kv[1]["metadata"].get(
                "creationTimestamp", "")):
            if uid in self._admitted or \
                    pod.get("status", {}).get("phase") in C.POD_FINISHED_PHASES:
                continue
            if pod["metadata"].get("deletionTimestamp") or self._retry_at.get(uid, 0) > now:
                continue
            self._admit(uid, pod)
        self.status.flush()

    def _admit(self, uid: str, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            allocations = self.devices.allocate_pod(pod)
        except AllocationError as e:
            self._failed(uid, pod, e)
            return
        # Files first: whoever waits on the in-memory state may read them next.
        for rec in allocations:
            self.records.save_allocation(rec)
        self.records.clear_failure(meta["namespace"], meta["name"])
        with self._cond:
            self._admitted[uid] = allocations
            self._failures.pop(uid, None)
            self._retry_at.pop(uid, None)
        self.status.pod_running(pod)
        if allocations:
            self.log(f"pod {meta['namespace']}/{meta['name']}: devices allocated to "
                     f"{len(allocations)} container(s)")

    def _failed(self, uid: str, pod: dict, err: AllocationError) -> None:
        meta = pod["metadata"]
        prev = self._failures.get(uid)
        attempts = prev.attempts + 1 if prev else 1
        # Retried on a later sync, backing off so that a failing plugin is not hammered.
        delay = min(self.retry_base * (2 ** (attempts - 1)), self.retry_max)
        failure = AllocationFailure(meta["namespace"], meta["name"], uid, err.container,
                                    err.resource, err.message, attempts, delay)
        self.records.save_failure(failure)
        with self._cond:
            self._failures[uid] = failure
            self._retry_at[uid] = time.monotonic() + delay
        if prev is None or prev.message != err.message:
            self.log(f"pod {meta['namespace']}/{meta['name']}: allocation failed: {err.message}")
            self.status.pod_event(pod, "FailedAllocation",
                                  f"container {err.container}: {err.message}")

    # Reading the state (tests, demo) ----------------------------------------------------

    def resources(self) -> dict[str, dict]:
        """resource -> {"endpoint", "connected", "devices": {id: health}, "pre_start_required",
        "get_preferred_allocation_available"} for every connected plugin."""
        out = {}
        for resource in sorted(self.devices.known):
            ep = self.devices.endpoint(resource)
            if ep is not None:
                out[resource] = {"endpoint": os.path.basename(ep.socket_path),
                                 "connected": ep.connected,
                                 "devices": {d.id: d.health for d in ep.devices.values()},
                                 "pre_start_required": ep.pre_start_required,
                                 "get_preferred_allocation_available": ep.preferred_available}
        return out

    def allocations(self, namespace: str | None = None,
                    pod: str | None = None) -> list[ContainerAllocation]:
        """Container allocations of admitted pods, optionally of one namespace / pod."""
        with self._cond:
            recs = [r for rs in self._admitted.values() for r in rs]
        return [r for r in recs if namespace in (None, r.namespace) and pod in (None, r.pod)]

    def failures(self) -> list[AllocationFailure]:
        """The latest allocation failure of every pod still waiting for devices."""
        with self._cond:
            return list(self._failures.values())

    def admitted(self, namespace: str, pod: str) -> bool:
        """Whether the pod got its devices (or needed none)."""
        with self._cond:
            return any(p["metadata"]["namespace"] == namespace and p["metadata"]["name"] == pod
                       for uid, p in self.pods.pods.items() if uid in self._admitted)

    def wait_registered(self, resource: str, devices: int | None = None,
                        timeout: float = 10.0) -> dict:
        """Waits until a plugin for resource is connected (with `devices` devices)."""
        def ready():
            info = self.resources().get(resource)
            if info and info["connected"] and (devices is None or len(info["devices"]) == devices):
                return info
            return None
        return wait_until(self._cond, ready, timeout, f"{resource} to register")

    def wait_allocated(self, namespace: str, pod: str,
                       timeout: float = 10.0) -> list[ContainerAllocation]:
        """Waits until the pod is admitted; returns its container allocations."""
        wait_until(self._cond, lambda: self.admitted(namespace, pod), timeout,
                   f"pod {namespace}/{pod} to be admitted")
        return self.allocations(namespace, pod)

    def wait_failure(self, namespace: str, pod: str, timeout: float = 10.0) -> AllocationFailure:
        """Waits until the pod has an allocation failure; returns it."""
        def failed():
            return next((f for f in self.failures()
                         if f.namespace == namespace and f.pod == pod), None)
        return wait_until(self._cond, failed, timeout, f"an allocation failure of {pod}")

    def set_pod_phase(self, namespace: str, pod: str, phase: str, message: str = "",
                      exit_codes: dict | None = None) -> None:
        """Reports a pod's containers finished (Succeeded/Failed), as kubelet would; with
        exit_codes (container name -> code) their terminated states too."""
        self.status.pod_phase(namespace, pod, phase, message, exit_codes)
        self._wake.set()
