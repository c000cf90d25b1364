"""Memory sizes as the shim's environment writes them (the same rules as c/vgpu/env.c).

A bare number is bytes; the suffixes k, m, g (binary multiples) and KiB, MiB, GiB are accepted
in any letter case: "3000m", "2G", "512MiB". Anything else ("1gb", "1.5g", "1 g", "-1", "") is
refused, because a limit read wrongly is worse than no process starting at all.
"""
import re

from hami_node.shim.errors import ShimConfigError

_SIZE = re.compile(r"([0-9]+)(k|m|g|kib|mib|gib)?", re.ASCII | re.IGNORECASE)
_SHIFT = {None: 0, "k": 10, "m": 20, "g": 30, "kib": 10, "mib": 20, "gib": 30}
MAX_BYTES = (1 << 64) - 1


def parse_size(text: str, name: str = "size") -> int:
    """Bytes for "3000m" / "2GiB" / "1073741824"; ShimConfigError naming `name` otherwise."""
    match = _SIZE.fullmatch(text)
    value = None
    if match:
        value = int(match.group(1)) << _SHIFT[(match.group(2) or "").lower() or None]
    if value is None or value > MAX_BYTES:
        raise ShimConfigError(f"{name}={text!r} is not a size: give bytes or a number with a "
                              "k/m/g (KiB/MiB/GiB) suffix, e.g. 3000m or 2g")
    return value


def env_size(nbytes: int) -> str:
    """The text HAMi writes for a size: whole MiB as "<n>m", anything else in bytes."""
    if nbytes < 0 or nbytes > MAX_BYTES:
        raise ShimConfigError(f"size {nbytes} is out of range")
    return f"{nbytes >> 20}m" if nbytes and nbytes % (1 << 20) == 0 else str(nbytes)


def human_size(nbytes: int) -> str:
    """A short readable size for tables: "1.5 GiB", "300.0 MiB", "512 B"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} B"
