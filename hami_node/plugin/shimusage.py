"""The metrics' UsageReader over the shim's own reader of a container's shared file
(`hami_node.shim.read_usage`), so the file's layout is known in one place only."""
from pathlib import Path
from typing import Optional

from hami_node.plugin.metrics import ContainerUse, DeviceUse
from hami_node.shim import CacheFileError
from hami_node.shim import read_usage as read_snapshot


def read_usage(path: Path) -> Optional[ContainerUse]:
    """A container's use per GPU, or None when its file is absent or unreadable (no process of
    the container has started under the shim yet, or the container is gone)."""
    try:
        snapshot = read_snapshot(path)
    except CacheFileError:
        return None
    pids = tuple(p.pid for p in snapshot.processes)   # live as this agent's /proc sees them
    devices = {}
    for dev in snapshot.devices:
        # `counted` is the shim's own total: right even when this agent cannot see the
        # container's processes (another pid namespace), where `used` would read 0.
        limited = 0 < dev.sm_limit < 100      # the compute limiter measures only then
        devices[dev.uuid] = DeviceUse(used=dev.counted, limit=dev.limit, pids=pids,
                                      data=dev.counted,
                                      sm_share=dev.sm_share if limited else None)
    return ContainerUse(devices)
