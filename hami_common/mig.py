"""MIG wire formats, as HAMi writes them: the profiles a GPU publishes in its register entry
(`migProfiles`: name, memoryMB, core, sliceCount, placements of {start, size}) and the pod
annotation `hami.io/vgpu-mig-allocations` (one reservation per MIG device: container and device
index, GPU UUID, profile, placement, and once the node agent made it, the MIG UUID with the GPU-
and compute-instance ids). Pure data and codecs; HamiFormatError says what is wrong."""
import json
from dataclasses import dataclass, field
from typing import Optional

from hami_common.errors import HamiFormatError


@dataclass(frozen=True, order=True)
class MigPlacement:
    """Memory slices [start, start + size) of a GPU."""

    start: int
    size: int

    def overlaps(self, other: "MigPlacement") -> bool:
        """Whether the two share a memory slice."""
        return self.start < other.start + other.size and other.start < self.start + self.size

    def to_json(self) -> dict:
        """HAMi's JSON object."""
        return {"start": self.start, "size": self.size}


@dataclass(frozen=True)
class MigProfile:
    """A GPU-instance profile a GPU allows, with its possible placements."""

    name: str                    # "1g.5gb"
    memory_mb: int               # MiB of the instance
    core: int                    # percent of the GPU's compute (slices / 7)
    slice_count: int             # compute slices
    placements: tuple = ()       # MigPlacement, in the driver's order

    def to_json(self) -> dict:
        """HAMi's JSON object."""
        return {"name": self.name, "memoryMB": self.memory_mb, "core": self.core,
                "sliceCount": self.slice_count,
                "placements": [p.to_json() for p in self.placements]}


def _uint(obj: dict, key: str, where: str, required: bool = True) -> Optional[int]:
    value = obj.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HamiFormatError(f"{where}: {key} must be a non-negative integer, got {value!r}")
    return value


def placement_from_json(obj, where: str) -> MigPlacement:
    """A placement object; HamiFormatError when malformed."""
    if not isinstance(obj, dict):
        raise HamiFormatError(f"{where}: a placement must be an object {{start, size}}")
    place = MigPlacement(_uint(obj, "start", where), _uint(obj, "size", where))
    if place.size == 0:
        raise HamiFormatError(f"{where}: placement size must be at least 1")
    return place


def profile_from_json(obj, where: str) -> MigProfile:
    """A migProfiles entry; HamiFormatError when malformed."""
    if not isinstance(obj, dict) or not obj.get("name"):
        raise HamiFormatError(f"{where}: a MIG profile must be an object with a name")
    name = str(obj["name"])
    places = obj.get("placements") or []
    if not isinstance(places, list):
        raise HamiFormatError(f"{where}: profile {name} placements must be a list")
    return MigProfile(name=name, memory_mb=_uint(obj, "memoryMB", f"{where} {name}"),
                      core=_uint(obj, "core", f"{where} {name}", False) or 0,
                      slice_count=_uint(obj, "sliceCount", f"{where} {name}", False) or 0,
                      placements=tuple(placement_from_json(p, f"{where} {name}") for p in places))


@dataclass(frozen=True)
class MigAllocation:
    """The scheduler's reservation of one MIG device, completed by the node agent."""

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    placement: MigPlacement
    mig_uuid: str = ""
    gpu_instance_id: Optional[int] = None
    compute_instance_id: Optional[int] = None

    @property
    def realized(self) -> bool:
        """The node agent made the instance."""
        return bool(self.mig_uuid)

    def to_json(self) -> dict:
        """HAMi's JSON object (runtime identity omitted until it exists)."""
        out = {"containerIndex": self.container_index, "deviceIndex": self.device_index,
               "gpuUUID": self.gpu_uuid, "profile": self.profile,
               "placement": self.placement.to_json()}
        if self.realized:
            out.update(migUUID=self.mig_uuid, gpuInstanceID=self.gpu_instance_id,
                       computeInstanceID=self.compute_instance_id)
        return out


def encode_allocations(allocations) -> str:
    """The annotation value."""
    return json.dumps([a.to_json() for a in allocations], separators=(",", ":"))


def decode_allocations(value: str) -> list:
    """MigAllocations from the annotation, with HAMi's checks: one incomplete, partly realized
    or repeated entry makes the whole annotation unusable."""
    if not (value or "").strip():
        return []
    try:
        items = json.loads(value)
    except json.JSONDecodeError as e:
        raise HamiFormatError(f"MIG allocations are not valid JSON: {e}") from e
    if not isinstance(items, list):
        raise HamiFormatError("MIG allocations must be a JSON list")
    out, seen = [], set()
    for i, obj in enumerate(items):
        where = f"MIG allocation {i}"
        if not isinstance(obj, dict) or not obj.get("gpuUUID") or not obj.get("profile"):
            raise HamiFormatError(f"{where} is incomplete (gpuUUID and profile are required)")
        runtime = [obj.get(k) is not None and obj.get(k) != ""
                   for k in ("migUUID", "gpuInstanceID", "computeInstanceID")]
        if any(runtime) and not all(runtime):
            raise HamiFormatError(f"{where} has a partial runtime identity")
        alloc = MigAllocation(
            container_index=_uint(obj, "containerIndex", where),
            device_index=_uint(obj, "deviceIndex", where), gpu_uuid=str(obj["gpuUUID"]),
            profile=str(obj["profile"]), placement=placement_from_json(obj.get("placement"), where),
            mig_uuid=str(obj.get("migUUID") or ""),
            gpu_instance_id=_uint(obj, "gpuInstanceID", where, False),
            compute_instance_id=_uint(obj, "computeInstanceID", where, False))
        key = (alloc.container_index, alloc.device_index)
        if key in seen:
            raise HamiFormatError(f"duplicate MIG allocation for container {key[0]} "
                                  f"device {key[1]}")
        seen.add(key)
        out.append(alloc)
    return out
