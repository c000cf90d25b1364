"""`hami.io/vgpu-devices-to-allocate` / `-allocated`: which GPU slices each container got.

`uuid,NVIDIA,memMiB,cores:` per device, `;` after each container, init containers first, empty
containers kept (so that positions line up with the pod spec).
"""
from dataclasses import dataclass

from hami_common.constants import DEVICE_VENDOR
from hami_common.errors import HamiFormatError


@dataclass(frozen=True)
class ContainerDevice:
    """One GPU slice given to one container."""

    uuid: str
    usedmem: int        # MiB
    usedcores: int      # percent of SMs
    vendor: str = DEVICE_VENDOR

    def __post_init__(self):
        if not self.uuid or any(c in self.uuid for c in ",:;"):
            raise HamiFormatError(f"device uuid {self.uuid!r} is empty or contains , : or ;")
        if self.usedmem < 0 or self.usedcores < 0:
            raise HamiFormatError(f"device {self.uuid}: negative memory or cores")


def encode(pod_devices) -> str:
    """The annotation value for a sequence (per container) of sequences of ContainerDevice."""
    return "".join("".join(f"{d.uuid},{d.vendor},{d.usedmem},{d.usedcores}:" for d in ctr) + ";"
                   for ctr in pod_devices)


def _decode_device(text: str) -> ContainerDevice:
    fields = text.split(",")
    if len(fields) != 4:
        raise HamiFormatError(f"device entry {text!r} must be uuid,vendor,memMiB,cores")
    try:
        mem, cores = int(fields[2]), int(fields[3])
    except ValueError as e:
        raise HamiFormatError(f"device entry {text!r}: memory and cores must be integers") from e
    return ContainerDevice(uuid=fields[0], vendor=fields[1], usedmem=mem, usedcores=cores)


def decode(value: str) -> tuple:
    """Per container, the tuple of devices; `()` for an empty annotation."""
    if not value:
        return ()
    parts = value.split(";")
    if parts[-1] == "":
        parts.pop()          # the separator after the last container
    return tuple(tuple(_decode_device(d) for d in part.split(":") if d) for part in parts)
