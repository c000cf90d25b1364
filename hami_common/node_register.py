"""`hami.io/node-nvidia-register`: the GPUs a node agent publishes, one object per GPU.

JSON is the current format. HAMi's older CSV form is decoded by `node_register_legacy`; `decode`
here accepts both so that readers need not care which agent wrote the annotation.
"""
import json
from dataclasses import asdict, dataclass

from hami_common.constants import DEVICE_MODE_HAMI_CORE, RESOURCE_CORES, RESOURCE_MEM
from hami_common.errors import HamiFormatError
from hami_common.mig import profile_from_json


@dataclass(frozen=True)
class DeviceInfo:
    """One physical GPU as registered: identity, capacity and health."""

    id: str
    index: int
    count: int          # how many tasks may share it (deviceSplitCount)
    devmem: int         # MiB, already multiplied by deviceMemoryScaling
    devcore: int        # percent of SMs, 100 unless deviceCoreScaling says otherwise
    type: str           # "NVIDIA-" + NVML name
    numa: int = 0
    mode: str = DEVICE_MODE_HAMI_CORE
    health: bool = True
    mig_profiles: tuple = ()    # MigProfile: what a GPU in mode "mig" can be cut into

    def __post_init__(self):
        if not self.id:
            raise HamiFormatError("device without an id (GPU UUID)")
        for name in ("index", "count", "devmem", "devcore"):
            if getattr(self, name) < 0:
                raise HamiFormatError(f"device {self.id}: {name} is negative")


def device_type_name(nvml_name: str) -> str:
    """The registered type for an NVML device name: prefixed with NVIDIA- unless it already is."""
    return nvml_name if nvml_name.upper().startswith("NVIDIA") else f"NVIDIA-{nvml_name}"


def _int_field(obj: dict, key: str, default=None) -> int:
    if key not in obj:
        if default is None:
            raise HamiFormatError(f"register entry {obj.get('id', '?')!r} lacks {key!r}")
        return default
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise HamiFormatError(f"register entry {obj.get('id', '?')!r}: {key} must be an integer, "
                              f"got {value!r}")
    return int(value)


def _device_from_json(obj) -> DeviceInfo:
    """HAMi's Go encoder omits zero values (`omitempty`): a missing health is false, a missing
    count or devmem is 0 (that GPU then takes no slice; the node's other GPUs still count)."""
    if not isinstance(obj, dict):
        raise HamiFormatError(f"register entry must be an object, got {type(obj).__name__}")
    health = obj.get("health", False)
    if not isinstance(health, bool):
        raise HamiFormatError(f"register entry {obj.get('id', '?')!r}: health must be true/false")
    return DeviceInfo(id=str(obj.get("id", "")), index=_int_field(obj, "index", 0),
                      count=_int_field(obj, "count", 0), devmem=_int_field(obj, "devmem", 0),
                      devcore=_int_field(obj, "devcore", 100), type=str(obj.get("type", "")),
                      numa=_int_field(obj, "numa", 0),
                      mode=str(obj.get("mode") or DEVICE_MODE_HAMI_CORE), health=health,
                      mig_profiles=_profiles(obj))


def _profiles(obj: dict) -> tuple:
    profiles = obj.get("migProfiles") or []
    if not isinstance(profiles, list):
        raise HamiFormatError(f"register entry {obj.get('id', '?')!r}: migProfiles must be a list")
    return tuple(profile_from_json(p, f"register entry {obj.get('id', '?')!r}") for p in profiles)


def _device_json(d: DeviceInfo) -> dict:
    out = asdict(d)
    del out["mig_profiles"]
    if d.mig_profiles:            # HAMi's encoder omits it when empty
        out["migProfiles"] = [p.to_json() for p in d.mig_profiles]
    return out


def encode(devices) -> str:
    """The JSON annotation value for a list of devices."""
    return json.dumps([_device_json(d) for d in devices], separators=(",", ":"))


def decode(value: str) -> list:
    """Devices from an annotation value in either format; HamiFormatError says what is wrong."""
    text = (value or "").strip()
    if not text:
        return []
    if not text.startswith("["):
        from hami_common import node_register_legacy
        return node_register_legacy.decode(text)
    try:
        items = json.loads(text)
    except json.JSONDecodeError as e:
        raise HamiFormatError(f"register annotation is not valid JSON: {e}") from e
    if not isinstance(items, list):
        raise HamiFormatError("register annotation must be a JSON list of devices")
    devices = [_device_from_json(item) for item in items]
    ids = [d.id for d in devices]
    if len(set(ids)) != len(ids):
        raise HamiFormatError(f"register annotation lists a device twice: {sorted(ids)}")
    return devices


def capacity(devices) -> dict:
    """The node status capacity (and allocatable) the devices stand for, for kubectl:
    `nvidia.com/gpumem` (MiB, scaled as registered) and `nvidia.com/gpucores` (percent points)
    summed over every registered GPU, healthy or not.

    Unhealthy GPUs are not taken off: for an extended resource no device plugin serves, kubelet
    copies capacity into allocatable, and its admission checks the sum of the pods' requests
    against it, so a pod already running on a GPU that later failed must still fit. kubelet's
    sum is of per-container figures (per GPU, never times the GPU count, and percentages not at
    all), so it never exceeds what the scheduler placed within the registered GPUs."""
    return {RESOURCE_MEM: str(sum(d.devmem for d in devices)),
            RESOURCE_CORES: str(sum(d.devcore for d in devices))}
