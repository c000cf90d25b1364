"""The node's ResourceSlice (resource.k8s.io/v1) for the GPUs it advertises: pure.

One pool per node (named after the node), one slice, one device per healthy GPU, named after
its UUID (lower case: a DNS label, stable when indices change). With consumable capacity
(the DRAConsumableCapacity gate, Kubernetes 1.34+), each device is shareable
(`allowMultipleAllocations`): kube-scheduler itself shares out its `memory` (bytes, in steps
of 1 MiB) and `cores` (percent of its time, 0..100) between claims. Without it, a device is
allocated whole.
"""
from dataclasses import dataclass
from typing import Iterable, Optional

from hami_common.constants import DRA_CORES, DRA_MEMORY
from hami_common.node_register import device_type_name
from hami_node.plugin.devices import GpuHealth

MIB = 1 << 20
API_VERSION = "resource.k8s.io/v1"


@dataclass(frozen=True)
class SliceOptions:
    """What shapes the node's slice besides its GPUs."""

    driver: str
    node: str
    node_uid: str = ""                 # the Node's UID: the slice's owner (deleted with it)
    consumable: bool = True            # shareable capacity (needs DRAConsumableCapacity)
    memory_scaling: float = 1.0
    core_scaling: float = 1.0
    driver_version: str = ""           # NVIDIA driver, e.g. 550.54.15
    cuda_version: str = ""             # CUDA driver API, e.g. 12.4


def device_name(uuid: str) -> str:
    """The slice's device name of a GPU: its UUID in lower case (GPU-0fc3... -> gpu-0fc3...)."""
    return uuid.lower()


def slice_name(options: SliceOptions) -> str:
    """The one slice of this node and driver."""
    return f"{options.node}-{options.driver}"


def _semver(text: str) -> Optional[str]:
    parts = text.split(".")
    if not text or len(parts) > 3 or not all(p.isdigit() for p in parts):
        return None
    return ".".join(str(int(p)) for p in parts + ["0"] * (3 - len(parts)))


def _version_attrs(options: SliceOptions) -> dict:
    out = {}
    for key, text in (("driverVersion", options.driver_version),
                      ("cudaVersion", options.cuda_version)):
        version = _semver(text)
        if version:
            out[key] = {"version": version}
        elif text:
            out[key] = {"string": text}
    return out


def memory_bytes(state: GpuHealth, options: SliceOptions) -> int:
    """The memory a GPU offers: physical x deviceMemoryScaling, whole MiB."""
    return int(state.gpu.memory_mib * options.memory_scaling) * MIB


def total_cores(options: SliceOptions) -> int:
    """The cores a GPU offers: 100 x deviceCoreScaling."""
    return int(100 * options.core_scaling)


def device(state: GpuHealth, options: SliceOptions) -> dict:
    """One GPU as a slice device."""
    gpu = state.gpu
    memory, cores = memory_bytes(state, options), total_cores(options)
    attrs = {"uuid": {"string": gpu.uuid}, "index": {"int": gpu.index},
             "model": {"string": gpu.name}, "type": {"string": device_type_name(gpu.name)},
             "numaNode": {"int": gpu.numa}, "memoryMiB": {"int": memory // MIB},
             **_version_attrs(options)}
    capacity = {DRA_MEMORY: {"value": str(memory)}, DRA_CORES: {"value": str(cores)}}
    out = {"name": device_name(gpu.uuid), "attributes": attrs, "capacity": capacity}
    if options.consumable:
        out["allowMultipleAllocations"] = True
        capacity[DRA_MEMORY]["requestPolicy"] = {
            "default": str(memory), "validRange": {"min": str(MIB), "step": str(MIB)}}
        capacity[DRA_CORES]["requestPolicy"] = {
            "default": "0", "validRange": {"min": "0", "max": str(cores), "step": "1"}}
    return out


def build_slice(states: Iterable[GpuHealth], options: SliceOptions, generation: int) -> dict:
    """The node's ResourceSlice: its healthy GPUs (an unhealthy one is left out until it
    recovers, so that kube-scheduler allocates no new claim on it)."""
    meta = {"name": slice_name(options)}
    if options.node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": options.node,
                                    "uid": options.node_uid, "controller": True}]
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": meta,
            "spec": {"driver": options.driver, "nodeName": options.node,
                     "pool": {"name": options.node, "generation": generation,
                              "resourceSliceCount": 1},
                     "devices": [device(s, options) for s in states if s.healthy]}}


def consumable_kept(sent: dict, stored: dict) -> bool:
    """Whether the API server kept the consumable-capacity fields of a slice it stored (with
    the DRAConsumableCapacity gate off it drops them silently)."""
    def shared(doc):
        return any(d.get("allowMultipleAllocations") for d in doc["spec"].get("devices") or [])
    return not shared(sent) or shared(stored)

