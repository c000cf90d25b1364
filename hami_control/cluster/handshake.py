"""HAMi's node handshake, in its current one-write form: the scheduler owns the annotation and
stamps `hami.io/node-handshake: Requesting_<its own time>` only when it is absent or says
something else (an older agent's `Reported_...`); the node agent never writes it. So a node
costs one handshake write, not two Node updates a minute. A node whose request is older than
60 s *and* on which kubelet offers no GPU any more is treated as gone: the age alone says
nothing (nobody answers), while kubelet's allocatable falls to zero when the agent's device
plugin is gone. An older agent that still answers `Reported_` is stamped over each time it
does, so with it the annotation alternates as before; with ours it is written once.
"""
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Optional

from hami_common import handshake as H
from hami_common.constants import ANNO_NODE_HANDSHAKE
from hami_common.errors import HamiFormatError
from hami_control.cluster.objects import allocatable_gpus, annotations

log = logging.getLogger(__name__)


def parse(node: dict) -> Optional[H.Handshake]:
    """The node's handshake annotation; None when absent or unreadable (logged)."""
    value = annotations(node).get(ANNO_NODE_HANDSHAKE)
    if not value:
        return None
    try:
        return H.decode(value)
    except HamiFormatError as e:
        log.warning("node %s: ignoring its %s: %s", (node.get("metadata") or {}).get("name"),
                    ANNO_NODE_HANDSHAKE, e)
        return None


@dataclass(frozen=True)
class NodeHealth:
    """What the handshake rule looks at on one node."""

    handshake: Optional[H.Handshake]
    allocatable: int

    @classmethod
    def of(cls, node: dict) -> "NodeHealth":
        """From a node object."""
        return cls(parse(node), allocatable_gpus(node))

    def gone(self, now: datetime, stale_after: timedelta = H.STALE_AFTER) -> bool:
        """HAMi's rule: an unanswered request older than stale_after and no allocatable GPU."""
        return self.handshake is not None and self.handshake.stale(now, stale_after) \
            and self.allocatable == 0

    def needs_request(self) -> bool:
        """Whether the scheduler stamps it (absent, or not a request of ours)."""
        return self.handshake is None or self.handshake.state != H.REQUESTING


def request_value(now: datetime) -> str:
    """The annotation value the scheduler writes."""
    return H.encode(H.Handshake(H.REQUESTING, now))
