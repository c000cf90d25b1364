"""HAMi's node handshake: the scheduler writes `hami.io/node-handshake: Requesting_<time>`, the
node agent answers `Reported_<time>` when it publishes its GPUs. A node whose agent left a
request unanswered for 60 s *and* on which kubelet offers no GPU any more is treated as gone.

Both conditions are required: an agent that never answers (an older or a minimal one) must not
make a healthy node vanish, and allocatable GPUs alone can lag behind a dead agent.
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
        """Whether the scheduler should ask again (the agent answered, or nobody asked yet)."""
        return self.handshake is None or self.handshake.state != H.REQUESTING


def request_value(now: datetime) -> str:
    """The annotation value the scheduler writes."""
    return H.encode(H.Handshake(H.REQUESTING, now))
