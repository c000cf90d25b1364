"""kubelet's device manager: registered plugins, which devices each pod holds, and the
per-container allocation sequence (choose, GetPreferredAllocation, Allocate,
PreStartContainer)."""
from __future__ import annotations

import os
import threading
from typing import Callable

from hami_common.deviceplugin import api_pb2

from .allocator import DeviceShortage, choose, containers_in_order, requested
from .endpoint import PluginCallError, PluginEndpoint
from .records import ContainerAllocation


class AllocationError(Exception):
    """A container could not get its devices; says which container and resource."""

    def __init__(self, container: str, resource: str, message: str):
        super().__init__(message)
        self.container = container
        self.resource = resource
        self.message = message


class DeviceManager:
    """Plugins by resource and devices by pod. Allocation runs on one thread at a time (the
    kubelet's pod admission is serial); the lock guards reads from other threads."""

    def __init__(self, plugin_dir: str, on_change: Callable[[str], None]):
        self.plugin_dir = plugin_dir
        self._on_change = on_change
        self._lock = threading.RLock()
        self._endpoints: dict[str, PluginEndpoint] = {}
        self.known: set[str] = set()  # every resource registered since start (kubelet's checkpoint)
        self._held: dict[str, dict[str, set[str]]] = {}  # pod uid -> resource -> device IDs

    def register(self, req: api_pb2.RegisterRequest) -> None:
        """Connects to a newly registered plugin, replacing an earlier one for the resource."""
        endpoint = PluginEndpoint(req.resource_name, os.path.join(self.plugin_dir, req.endpoint),
                                  req.options, lambda ep: self._changed(ep))
        with self._lock:
            old = self._endpoints.get(req.resource_name)
            self._endpoints[req.resource_name] = endpoint
            self.known.add(req.resource_name)
        if old is not None:
            old.stop()
        endpoint.start()

    def _changed(self, endpoint: PluginEndpoint) -> None:
        if self._endpoints.get(endpoint.resource) is endpoint:
            self._on_change(endpoint.resource)

    def disconnect_all(self) -> None:
        """Drops every plugin connection (kubelet stopping or restarting)."""
        with self._lock:
            endpoints, self._endpoints = list(self._endpoints.values()), {}
        for endpoint in endpoints:
            endpoint.stop()

    def endpoint(self, resource: str) -> PluginEndpoint | None:
        """The plugin currently serving resource."""
        return self._endpoints.get(resource)

    def counts(self) -> dict[str, tuple[int, int]]:
        """resource -> (capacity, allocatable): all devices, healthy devices (0 when none)."""
        with self._lock:
            out = {}
            for resource in self.known:
                ep = self._endpoints.get(resource)
                devices = list(ep.devices.values()) if ep else []
                out[resource] = (len(devices), sum(d.healthy for d in devices))
            return out

    def held(self, pod_uid: str) -> dict[str, set[str]]:
        """Devices a pod holds, by resource."""
        with self._lock:
            return {r: set(ids) for r, ids in self._held.get(pod_uid, {}).items()}

    def release(self, pod_uid: str) -> bool:
        """Frees a pod's devices (pod gone or finished); True if it held any."""
        with self._lock:
            return self._held.pop(pod_uid, None) is not None

    def _in_use(self, resource: str, except_uid: str) -> set[str]:
        with self._lock:
            return {d for uid, by_res in self._held.items() if uid != except_uid
                    for d in by_res.get(resource, ())}

    def allocate_pod(self, pod: dict) -> list[ContainerAllocation]:
        """Allocates every container of a pod in start order; on failure frees what this
        attempt took and raises AllocationError."""
        meta = pod["metadata"]
        uid = meta["uid"]
        records: list[ContainerAllocation] = []
        reuse: dict[str, list[str]] = {}  # devices of init containers, reusable by later ones
        held: dict[str, set[str]] = {}
        with self._lock:
            self._held[uid] = held
        try:
            for container, is_init in containers_in_order(pod):
                try:
                    needs = requested(container, sorted(self.known))
                except ValueError as e:
                    raise AllocationError(container.get("name", ""), "", str(e)) from e
                if needs:
                    records.append(self._allocate_container(pod, container, is_init, needs,
                                                            reuse, held))
        except AllocationError:
            self.release(uid)
            raise
        return records

    def _allocate_container(self, pod, container, is_init, needs, reuse, held):
        meta = pod["metadata"]
        name = container.get("name", "")
        rec = ContainerAllocation(meta["namespace"], meta["name"], meta["uid"], name, is_init,
                                  image=container.get("image", ""),
                                  command=list(container.get("command") or []),
                                  args=list(container.get("args") or []),
                                  spec_env={e["name"]: e.get("value", "")
                                            for e in container.get("env") or [] if "name" in e})
        for resource, count in needs.items():
            ep = self.endpoint(resource)
            if ep is None or not ep.connected:
                raise AllocationError(name, resource, f"no device plugin is serving {resource} "
                                      "right now (not registered, or its stream ended)")
            ids = self._pick(ep, name, count, meta["uid"], reuse.get(resource, []), held)
            try:
                resp = ep.allocate(ids)
                if ep.pre_start_required:
                    ep.pre_start(ids)
            except PluginCallError as e:
                raise AllocationError(name, resource, str(e)) from e
            held.setdefault(resource, set()).update(ids)
            if is_init:
                reuse[resource] = sorted(set(reuse.get(resource, [])) | set(ids))
            else:
                reuse[resource] = [d for d in reuse.get(resource, []) if d not in ids]
            _merge(rec, resource, ids, resp)
        return rec

    def _pick(self, ep, container, count, uid, reusable, held) -> list[str]:
        taken = self._in_use(ep.resource, uid) | (held.get(ep.resource, set()) - set(reusable))
        available = sorted(d.id for d in ep.devices.values() if d.healthy and d.id not in taken
                           and d.id not in reusable)
        preferred = None
        try:
            if ep.preferred_available and len(reusable) < count:
                preferred = ep.preferred(available + list(reusable), list(reusable)[:count],
                                         count)
            return choose(available, count, reusable, preferred)
        except DeviceShortage as e:
            raise AllocationError(container, ep.resource, f"{ep.resource}: {e}") from e
        except PluginCallError as e:
            raise AllocationError(container, ep.resource, str(e)) from e


def _merge(rec: ContainerAllocation, resource: str, ids: list[str],
           resp: api_pb2.ContainerAllocateResponse) -> None:
    rec.devices_by_resource[resource] = list(ids)
    rec.envs.update(dict(resp.envs))
    rec.annotations.update(dict(resp.annotations))
    rec.mounts += [{"container_path": m.container_path, "host_path": m.host_path,
                    "read_only": m.read_only} for m in resp.mounts]
    rec.devices += [{"container_path": d.container_path, "host_path": d.host_path,
                     "permissions": d.permissions} for d in resp.devices]
    rec.cdi_devices += [c.name for c in resp.cdi_devices]
