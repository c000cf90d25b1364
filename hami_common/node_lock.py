"""`hami.io/mutex.lock`: `<RFC3339 time>,<namespace>,<pod>`, the scheduler's per-node bind lock."""
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from hami_common.errors import HamiFormatError

LOCK_EXPIRY = timedelta(minutes=5)


@dataclass(frozen=True)
class NodeLock:
    """Who holds a node's bind lock, and since when."""

    time: datetime
    namespace: str
    pod: str

    def expired(self, now: datetime, expiry: timedelta = LOCK_EXPIRY) -> bool:
        """Whether the lock is older than its expiry at `now`."""
        return now - self.time > expiry


def format_time(when: datetime) -> str:
    """RFC3339 in UTC with a Z, seconds precision (Go's time.RFC3339)."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """An RFC3339 timestamp ("Z" or an offset); HamiFormatError if malformed."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise HamiFormatError(f"{text!r} is not an RFC3339 time") from e
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def encode(lock: NodeLock) -> str:
    """The annotation value."""
    for part in (lock.namespace, lock.pod):
        if "," in part:
            raise HamiFormatError(f"lock owner {part!r} contains a comma")
    return f"{format_time(lock.time)},{lock.namespace},{lock.pod}"


def decode(value: str) -> NodeLock:
    """The lock from an annotation value. Old HAMi wrote only the time: owner is then empty."""
    parts = value.split(",")
    if len(parts) == 1:
        return NodeLock(parse_time(parts[0]), "", "")
    if len(parts) != 3:
        raise HamiFormatError(f"lock {value!r} must be <RFC3339 time>,<namespace>,<pod>")
    return NodeLock(parse_time(parts[0]), parts[1], parts[2])
