"""Allocate's pure core: from a pod's scheduler annotation and the device IDs kubelet chose, the
answer for one container (environment, mounts, device nodes) and the annotation afterwards.

No I/O here; `allocator.py` finds the pod, writes the annotations and the shared directories.
"""
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

from hami_common import pod_devices
from hami_common.constants import ANNO_DEVICES_TO_ALLOCATE, RESOURCE_PRIORITY
from hami_common.errors import HamiFormatError, RequestError
from hami_common.request import parse_container
from hami_node.plugin import layout as L
from hami_node.plugin.devices import DeviceTable, parse_virtual_id
from hami_node.plugin.errors import AllocationError
from hami_node.shim import ShimError, ShimSettings

CONTROL_DEVICE = "/dev/nvidiactl"
# Created on first use (nvidia-modprobe), so possibly absent: a device spec whose host path is
# missing makes the runtime fail the container, so they are passed only when present.
UVM_DEVICES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


@dataclass(frozen=True)
class Mount:
    """A host path mounted into the container."""

    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class DeviceNode:
    """A device node made available in the container."""

    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class ContainerAnswer:
    """Allocate's answer for one container, and where its shared directory lives."""

    container: str
    envs: dict
    mounts: tuple
    devices: tuple
    shared_dir: str = ""
    limits: tuple = ()      # (GPU UUID, memory MiB, SM percent) per visible device
    warnings: tuple = field(default=(), compare=False)
    cdi_devices: tuple = ()  # fully qualified CDI names ("nvidia.com/gpu=GPU-...")


@dataclass(frozen=True)
class Limits:
    """The node settings that shape every answer."""

    split: int
    memory_scaling: float = 1.0
    default_memory: int = 0
    default_cores: int = 0
    disable_core_limit: bool = False
    resource: str = "nvidia.com/gpu"
    # CDI kind of the node's NVIDIA CDI spec (nvidia-ctk's "nvidia.com/gpu"); empty: no CDI.
    # With it, the runtime injects device nodes and driver files from the spec, so the answer
    # names the GPUs as CDI devices instead of listing device nodes itself.
    cdi_kind: str = ""


def pod_containers(pod: Mapping) -> list:
    """Container specs in annotation order: init containers first."""
    spec = pod.get("spec") or {}
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def decode_entries(pod: Mapping) -> tuple:
    """Per container, the devices still to allocate; AllocationError when malformed."""
    meta = pod.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(ANNO_DEVICES_TO_ALLOCATE, "")
    try:
        entries = pod_devices.decode(value)
    except HamiFormatError as e:
        raise AllocationError(f"annotation {ANNO_DEVICES_TO_ALLOCATE} of pod "
                              f"{meta.get('namespace')}/{meta.get('name')} is malformed ({e}); "
                              "it is written by the scheduler: delete the pod so that it is "
                              "scheduled again") from e
    count = len(pod_containers(pod))
    if len(entries) > count:
        raise AllocationError(f"annotation {ANNO_DEVICES_TO_ALLOCATE} of pod "
                              f"{meta.get('namespace')}/{meta.get('name')} lists {len(entries)} "
                              f"containers but the pod has {count}; delete the pod so that it "
                              "is scheduled again")
    return entries


def next_positions(entries: Sequence, wanted: int) -> list:
    """Positions of the next `wanted` containers with devices still to allocate."""
    return [i for i, entry in enumerate(entries) if entry][:wanted]


def consumed(entries: Sequence, positions: Sequence[int]) -> str:
    """The to-allocate annotation once the entries at `positions` are handed out (emptied)."""
    done = set(positions)
    kept = [() if i in done else tuple(entry) for i, entry in enumerate(entries)]
    return pod_devices.encode(kept)


def check_devices(kubelet_ids: Sequence[str], entry: Sequence, table: DeviceTable,
                  container: str, limits: Limits) -> tuple:
    """Checks kubelet's device IDs and the annotation entry against this node; returns
    warnings (kubelet's IDs on other GPUs than the annotation: the annotation wins)."""
    unknown = []
    kubelet_gpus = set()
    for device_id in kubelet_ids:
        try:
            uuid, replica = parse_virtual_id(device_id)
        except ValueError:
            uuid, replica = "", -1
        if table.get(uuid) is None or not 0 <= replica < limits.split:
            unknown.append(device_id)
        kubelet_gpus.add(uuid)
    if unknown:
        raise AllocationError(f"kubelet passed device IDs this plugin does not advertise: "
                              f"{', '.join(unknown)}; kubelet's checkpoint is from another "
                              "configuration (deviceSplitCount or GPUs changed): drain the node")
    if len(kubelet_ids) != len(entry):
        raise AllocationError(
            f"device number not matched for container {container!r}: kubelet allocated "
            f"{len(kubelet_ids)} {limits.resource} but the scheduler's annotation "
            f"{ANNO_DEVICES_TO_ALLOCATE} assigns {len(entry)} GPU(s); the pod was not scheduled "
            "by hami-scheduler or its annotation was edited: delete the pod so that it is "
            "scheduled again")
    uuids = [d.uuid for d in entry]
    if len(set(uuids)) != len(uuids):
        raise AllocationError(f"annotation {ANNO_DEVICES_TO_ALLOCATE} assigns GPU {uuids} "
                              f"twice to container {container!r}; delete the pod")
    for uuid in uuids:
        state = table.get(uuid)
        if state is None:
            raise AllocationError(f"GPU {uuid} assigned to container {container!r} is not "
                                  "advertised by this node (another node's GPU, or excluded by "
                                  "excludeDevices); delete the pod so that it is scheduled again")
        if not state.healthy:
            raise AllocationError(f"GPU {uuid} assigned to container {container!r} is "
                                  f"Unhealthy ({state.reason}); delete the pod so that it is "
                                  "scheduled on a healthy GPU")
    if kubelet_gpus != set(uuids):
        return (f"kubelet chose virtual devices of GPUs {sorted(kubelet_gpus)} for container "
                f"{container!r}, the scheduler chose {sorted(uuids)}; the scheduler's choice "
                "is used",)
    return ()


def _priority(spec: Mapping) -> Optional[int]:
    resources = spec.get("resources") or {}
    for section in ("limits", "requests"):
        value = (resources.get(section) or {}).get(RESOURCE_PRIORITY)
        if value is not None:
            try:
                return int(str(value))
            except ValueError as e:
                raise AllocationError(f"container {spec.get('name')!r}: {RESOURCE_PRIORITY} "
                                      f"{value!r} is not an integer (0 is the highest)") from e
    return None


def _disables_shim(spec: Mapping) -> bool:
    """HAMi's escape hatch: a container env CUDA_DISABLE_CONTROL=true gets no preload."""
    return any(e.get("name") == "CUDA_DISABLE_CONTROL" and
               str(e.get("value", "")).lower() in ("true", "1")
               for e in spec.get("env") or [] if isinstance(e, Mapping))


def device_limits(entry: Sequence, table: DeviceTable, limits: Limits) -> tuple:
    """(GPU UUID, memory MiB, SM percent) per visible device: the scheduler's figures, else
    the node's defaults."""
    out = []
    for dev in entry:
        gpu = table.get(dev.uuid).gpu
        memory = dev.usedmem or limits.default_memory or \
            int(gpu.memory_mib * limits.memory_scaling)
        out.append((dev.uuid, memory, dev.usedcores or limits.default_cores))
    return tuple(out)


def build_envs(per_device: Sequence, limits: Limits, priority: Optional[int]) -> dict:
    """The container's environment (protocols section 5) for its `device_limits`; the shim's
    variables are written, and checked, by the shim's own Python side."""
    memory = {i: mib << 20 for i, (_, mib, _) in enumerate(per_device)}
    cores = {i: pct for i, (_, _, pct) in enumerate(per_device)}
    settings = ShimSettings(device_memory_limits=memory, sm_limit=cores[0],
                            device_sm_limits=cores, cache_path=L.CONTAINER_CACHE,
                            priority=priority,
                            policy="disable" if limits.disable_core_limit else "default")
    try:
        envs = settings.to_env()
        ShimSettings.from_env(envs)   # what the shim would refuse is refused here, first
    except ShimError as e:
        raise AllocationError(f"the container's shim settings are invalid: {e}") from e
    envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(uuid for uuid, _, _ in per_device)
    if limits.memory_scaling > 1:
        envs["CUDA_OVERSUBSCRIBE"] = "true"
    return envs


def _own_ask(spec: Mapping) -> tuple:
    """(MiB, SM percent) the container itself asks for (0: not given)."""
    try:
        ask = parse_container(spec)
    except RequestError as e:
        raise AllocationError(f"container {spec.get('name')!r}: {e}") from e
    return ask.mem_mib, ask.cores


def mig_limits(per_device: tuple, instances: Sequence, spec: Mapping = None) -> tuple:
    """The limits of a container on MIG instances: each device is its instance (MIG UUID).
    The scheduler records an instance as HAMi does (its MiB and its share of the GPU's
    compute), so the caps inside it are the container's own: its gpumem within the
    instance's memory (else the whole instance) and its gpucores as a share of the
    instance's SMs (the shim holds both against the instance)."""
    by_gpu = {a.gpu_uuid: a for a in instances}
    if not by_gpu:
        return per_device
    mem, cores = _own_ask(spec or {})
    out = []
    for uuid, memory, pct in per_device:
        alloc = by_gpu.get(uuid)
        if alloc is None:
            out.append((uuid, memory, pct))
            continue
        size = alloc.memory_mb or memory
        out.append((alloc.mig_uuid, min(mem, size) if mem else size, cores))
    return tuple(out)


def plan_container(kubelet_ids: Sequence[str], entry: Sequence, spec: Mapping, pod_uid: str,
                   table: DeviceTable, limits: Limits, layout: L.HostLayout,
                   present: Callable[[str], bool] = lambda path: True,
                   instances: Sequence = ()) -> ContainerAnswer:
    """The whole answer for one container; AllocationError says what to fix. `present`: whether
    a device node exists on the host (the allocator asks the file system). `instances`: the
    container's realized MIG allocations (with `memory_mb` of each instance)."""
    name = str(spec.get("name", ""))
    warnings = check_devices(kubelet_ids, entry, table, name, limits)
    shared = layout.container_dir(pod_uid, name)
    mounts = [Mount(L.CONTAINER_LIB, str(layout.lib), True),
              Mount(L.CONTAINER_SHARED_DIR, str(shared), False)]
    if not _disables_shim(spec):
        mounts.append(Mount(L.PRELOAD_PATH, str(layout.preload), True))
    if limits.cdi_kind:
        devices = []
        cdi = tuple(f"{limits.cdi_kind}={d.uuid}" for d in entry)
    else:
        devices = [DeviceNode(p, p) for p in (CONTROL_DEVICE,) + UVM_DEVICES
                   if p == CONTROL_DEVICE or present(p)]
        devices += [DeviceNode(f"/dev/nvidia{table.get(d.uuid).gpu.minor}",
                               f"/dev/nvidia{table.get(d.uuid).gpu.minor}") for d in entry]
        cdi = ()
    per_device = mig_limits(device_limits(entry, table, limits), instances, spec)
    envs = build_envs(per_device, limits, _priority(spec))
    return ContainerAnswer(container=name, envs=envs, mounts=tuple(mounts),
                           devices=tuple(devices), shared_dir=str(shared), limits=per_device,
                           warnings=warnings, cdi_devices=cdi)


def preferred_devices(available: Sequence[str], must_include: Sequence[str], size: int,
                      uuids: Sequence[str]) -> list:
    """kubelet's choice steered to the GPUs the scheduler picked: must_include first, then one
    virtual device of each scheduled GPU, then the lowest free IDs."""
    picked = list(dict.fromkeys(must_include))[:size]
    have = {_gpu_of(d)[0] for d in picked}
    pool = sorted((d for d in available if d not in picked), key=_gpu_of)
    for uuid in uuids:
        if len(picked) >= size or uuid in have:
            continue
        choice = next((d for d in pool if _gpu_of(d)[0] == uuid and d not in picked), None)
        if choice:
            picked.append(choice)
            have.add(uuid)
    picked += [d for d in pool if d not in picked][:size - len(picked)]
    return picked


def _gpu_of(device_id: str) -> tuple:
    """(GPU UUID, replica) for sorting; foreign IDs sort by their text."""
    try:
        return parse_virtual_id(device_id)
    except ValueError:
        return device_id, -1
