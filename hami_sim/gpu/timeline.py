"""Ground truth of who used a simulated GPU when: every busy interval (start, end, pid) of the
device timeline, collected from the state file's ring before it wraps.

The ring keeps the last 1024 intervals per device (back-to-back kernels of one process merge
into one interval), so a recorder polls it (`poll()`, e.g. every 100 ms, or `run_in_background`)
and keeps every interval by its sequence number. The newest interval may still grow when the
same process queues more work right behind it, so it is read again at the next poll.
Shares are exact: an interval ends where the simulated kernel ends, in CLOCK_MONOTONIC time
(the clock of Python's time.monotonic_ns on Linux).
"""
import threading
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple

from hami_sim.gpu.state import BUSY_RING, STATE_FILE, read_state

Interval = Tuple[int, int, int]  # start_ns, end_ns, pid


class BusyRecorder:
    """Collects the busy intervals of the devices of one simulated state directory."""

    def __init__(self, state_dir: Path, devices: Iterable[int]):
        self.path = Path(state_dir) / STATE_FILE
        self.devices = list(devices)
        self.intervals: Dict[int, Dict[int, Interval]] = {d: {} for d in self.devices}
        self.lost = 0  # intervals overwritten before they were read (poll more often)
        self._last: Dict[int, Optional[int]] = {d: None for d in self.devices}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def poll(self) -> None:
        """Reads the rings once."""
        state = read_state(self.path)
        for d in self.devices:
            dev, seen, last = state.devices[d], self.intervals[d], self._last[d]
            count = dev.busy_count
            oldest = max(0, count - BUSY_RING)
            if last is not None and oldest > last + 1:
                self.lost += oldest - last - 1
            for seq in range(max(oldest, last or 0), count):  # the last one may have grown
                b = dev.busy[seq % BUSY_RING]
                seen[seq] = (b.start_ns, b.end_ns, b.pid)
            self._last[d] = count - 1 if count else None

    def run_in_background(self, every: float = 0.1) -> "BusyRecorder":
        """Polls from a daemon thread until stop()."""
        def loop():
            while not self._stop.wait(every):
                self.poll()
        self.poll()
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the background thread and reads the rings a last time."""
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.poll()

    def busy_ns(self, device: int, pids: Iterable[int], start: int, end: int) -> int:
        """Device time spent on `pids`' work within [start, end)."""
        wanted = set(pids)
        return sum(max(0, min(e, end) - max(s, start))
                   for s, e, pid in self.intervals[device].values() if pid in wanted)

    def share(self, device: int, pids: Iterable[int], start: int, end: int) -> float:
        """Fraction of [start, end) the device spent on `pids`' work."""
        return self.busy_ns(device, pids, start, end) / (end - start)

    def shares_by_bin(self, device: int, pids: Iterable[int], start: int, end: int,
                      bin_ns: int):
        """The share in consecutive bins of `bin_ns` (to see oscillation)."""
        return [self.share(device, pids, t, t + bin_ns) for t in range(start, end - bin_ns + 1,
                                                                        bin_ns)]
