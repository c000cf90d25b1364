"""Time as the control plane sees it: wall time for what goes on the wire, a monotonic clock
for durations. Injected everywhere so that tests can move time (lock expiry, leases)."""
import time
from datetime import datetime, timezone
from typing import Protocol


class Clock(Protocol):
    """Wall and monotonic time."""

    def now(self) -> datetime:
        """The current UTC time."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary start, never going back."""

    def sleep(self, seconds: float) -> None:
        """Waits."""


class SystemClock:
    """The production clock."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
