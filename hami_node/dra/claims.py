"""A claim's allocation read into what hami-node gives its containers, and the CDI spec that
brings it: pure.

Each device allocated to the claim on this node's pool becomes one CDI device whose edits
bring the shim exactly as Allocate does (the same container paths: the library, the
preload file, the shared directory) with that device's limits in a variable of its own
(`HAMI_VGPU_DEVICE_<tag>`, the shim's per-UUID form), so several claims or devices in one
container never overwrite each other. The GPU itself reaches the container the NVIDIA way:
by the node's NVIDIA CDI spec when `cdiKind` is set, else as NVIDIA's "volume-mounts" device
list (one mount per GPU under /var/run/nvidia-container-devices, which the NVIDIA container
toolkit reads with `accept-nvidia-visible-devices-as-volume-mounts`), again one entry per GPU.

The accounting file belongs to the claim: every container of every pod using the claim
shares it, so a claim shared by several pods is held to one limit.
"""
from dataclasses import dataclass
from typing import Mapping, Optional

from hami_common.constants import DRA_CDI_KIND, DRA_CORES, DRA_MEMORY
from hami_common.errors import HamiFormatError
from hami_common.quantity import parse_quantity
from hami_node.plugin import layout as L
from hami_node.plugin.devices import DeviceTable
from hami_node.shim import ShimError, ShimSettings
from hami_node.dra.slices import SliceOptions, device_name, memory_bytes

CDI_VERSION = "0.6.0"
DEVICE_LIST_DIR = "/var/run/nvidia-container-devices"   # NVIDIA's volume-mounts strategy


class PrepareError(Exception):
    """A claim that cannot be prepared on this node; the message says what to fix."""


@dataclass(frozen=True)
class ClaimDevice:
    """One device of a claim as this node gives it."""

    request: str          # the claim's request (a subrequest's parent) it was allocated for
    device: str           # the slice device name
    uuid: str
    memory: int           # bytes: the claim's cap on this GPU
    cores: int            # percent of the GPU's time; 0: no compute limit
    share_id: str = ""    # the allocation's share ID ("" when allocated whole)


@dataclass(frozen=True)
class Shaping:
    """The node settings that shape every prepared device."""

    cdi_kind: str = ""              # the node's NVIDIA CDI kind (nvidia.com/gpu), or none
    disable_core_limit: bool = False


def _quantity(result: Mapping, key: str, where: str) -> Optional[int]:
    raw = (result.get("consumedCapacity") or {}).get(key)
    if raw is None:
        return None
    try:
        return int(parse_quantity(raw))
    except HamiFormatError as e:
        raise PrepareError(f"{where}: consumedCapacity {key}={raw!r} is not a quantity") from e


def claim_devices(claim: Mapping, table: DeviceTable, options: SliceOptions) -> list:
    """The devices allocated to the claim on this node's pool (ClaimDevice list)."""
    meta = claim.get("metadata") or {}
    what = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise PrepareError(f"{what} is not allocated: kube-scheduler allocates it when it "
                           "schedules the pod; a claim is prepared only after that")
    by_name = {device_name(s.gpu.uuid): s for s in table.states()}
    out = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        if result.get("driver") != options.driver or result.get("pool") != options.node:
            continue
        where = f"{what}, device {result.get('device')}"
        state = by_name.get(result.get("device"))
        if state is None:
            raise PrepareError(f"{where}: no such GPU on node {options.node} (excluded, or the "
                               "GPUs changed since it was allocated): delete the pod")
        if not state.healthy:
            raise PrepareError(f"{where}: GPU {state.gpu.uuid} is Unhealthy ({state.reason}); "
                               "delete the pod so that its claim is allocated a healthy GPU")
        memory = _quantity(result, DRA_MEMORY, where)
        cores = _quantity(result, DRA_CORES, where)
        share = result.get("shareID") or ""
        out.append(ClaimDevice(
            request=str(result.get("request", "")).split("/")[0], device=result["device"],
            uuid=state.gpu.uuid,
            memory=memory_bytes(state, options) if memory is None else memory,
            cores=0 if cores is None else cores, share_id=share))
    if not out:
        raise PrepareError(f"{what} has no device of driver {options.driver} on node "
                           f"{options.node}; kubelet sent it to the wrong driver or node")
    return out


def cdi_name(claim_uid: str, position: int) -> str:
    """The CDI device name of a claim's device."""
    return f"{claim_uid}-{position}"


def cdi_ids(claim_uid: str, devices, shaping: Shaping) -> list:
    """Per device, the fully qualified CDI IDs kubelet hands the runtime."""
    out = []
    for i, d in enumerate(devices):
        ids = [f"{DRA_CDI_KIND}={cdi_name(claim_uid, i)}"]
        if shaping.cdi_kind:
            ids.append(f"{shaping.cdi_kind}={d.uuid}")
        out.append(ids)
    return out


def _tag(claim_uid: str, position: int) -> str:
    return f"{claim_uid.replace('-', '_')}_{position}"


def device_edits(claim_uid: str, position: int, device: ClaimDevice, layout: L.HostLayout,
                 shaping: Shaping) -> dict:
    """The containerEdits of one device."""
    settings = ShimSettings(cache_path=L.CONTAINER_CACHE,
                            policy="disable" if shaping.disable_core_limit else "default",
                            uuid_limits={_tag(claim_uid, position):
                                         (device.uuid, device.memory, device.cores)})
    try:
        env = settings.to_env()
    except ShimError as e:
        raise PrepareError(f"device {device.device}: the shim settings are invalid: {e}") from e
    mounts = [{"hostPath": str(layout.lib), "containerPath": L.CONTAINER_LIB,
               "options": ["ro", "nosuid", "nodev", "bind"]},
              {"hostPath": str(layout.preload), "containerPath": L.PRELOAD_PATH,
               "options": ["ro", "nosuid", "nodev", "bind"]},
              {"hostPath": str(layout.claim_dir(claim_uid)),
               "containerPath": L.CONTAINER_SHARED_DIR,
               "options": ["rw", "nosuid", "nodev", "bind"]}]
    if not shaping.cdi_kind:
        env["NVIDIA_VISIBLE_DEVICES"] = DEVICE_LIST_DIR
        mounts.append({"hostPath": "/dev/null",
                       "containerPath": f"{DEVICE_LIST_DIR}/{device.uuid}",
                       "options": ["ro", "nosuid", "nodev", "bind"]})
    return {"env": [f"{k}={v}" for k, v in sorted(env.items())], "mounts": mounts}


def cdi_spec(claim_uid: str, devices, layout: L.HostLayout, shaping: Shaping) -> dict:
    """The claim's CDI spec: one device per allocated device."""
    return {"cdiVersion": CDI_VERSION, "kind": DRA_CDI_KIND,
            "devices": [{"name": cdi_name(claim_uid, i),
                         "containerEdits": device_edits(claim_uid, i, d, layout, shaping)}
                        for i, d in enumerate(devices)]}
