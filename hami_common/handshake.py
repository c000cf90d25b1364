"""`hami.io/node-handshake`: `Requesting_<YYYY-MM-DD HH:MM:SS>` from the scheduler, `Reported_...`
from the node agent. A node whose agent stopped answering for 60 s is treated as gone."""
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from hami_common.errors import HamiFormatError

REQUESTING = "Requesting"
REPORTED = "Reported"
DELETED = "Deleted"
STATES = (REQUESTING, REPORTED, DELETED)
STALE_AFTER = timedelta(seconds=60)
_FORMAT = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True)
class Handshake:
    """One side's last word on the handshake and when it said it (UTC)."""

    state: str
    time: datetime

    def stale(self, now: datetime, after: timedelta = STALE_AFTER) -> bool:
        """A scheduler request the node agent has not answered for longer than `after`."""
        return self.state == REQUESTING and now - self.time > after


def encode(handshake: Handshake) -> str:
    """The annotation value."""
    if handshake.state not in STATES:
        raise HamiFormatError(f"handshake state {handshake.state!r} not one of {STATES}")
    return f"{handshake.state}_{handshake.time.astimezone(timezone.utc).strftime(_FORMAT)}"


def decode(value: str) -> Handshake:
    """The handshake from an annotation value (`_` or a space after the state)."""
    for state in STATES:
        if value.startswith(state) and value[len(state):len(state) + 1] in ("_", " "):
            text = value[len(state) + 1:].strip()[:19]
            try:
                when = datetime.strptime(text, _FORMAT).replace(tzinfo=timezone.utc)
            except ValueError as e:
                raise HamiFormatError(f"handshake {value!r}: time must be YYYY-MM-DD HH:MM:SS") from e
            return Handshake(state, when)
    raise HamiFormatError(f"handshake {value!r} must start with one of {STATES} and '_'")
