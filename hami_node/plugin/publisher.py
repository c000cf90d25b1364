"""The node annotation publisher and the agent's periodic housekeeping.

Every `interval` seconds, and at once when a GPU's health changes, it reads the Node and patches
`hami.io/node-nvidia-register` (HAMi's JSON list, health included) when it differs, and the node
status capacity/allocatable of `nvidia.com/gpumem` and `nvidia.com/gpucores` computed from the
same register entries (`node_register.capacity`), so that kubectl shows them. The handshake is
the scheduler's alone (HAMi's current scheme: one write per node, see
hami_control/cluster/handshake.py), so the agent never writes it. The same loop releases stale
node locks and removes the shared directories of pods that left the node.
"""
import threading
import time
from typing import Callable, Optional

from hami_common import node_register
from hami_common.constants import ANNO_NODE_REGISTER
from hami_common.errors import HamiFormatError
from hami_common.quantity import parse_quantity
from hami_node.plugin import layout as L
from hami_node.plugin.cluster import ClusterApi
from hami_node.plugin.devices import DeviceTable, register_entries
from hami_node.plugin.errors import ClusterError

ORPHAN_GRACE_S = 60.0   # a shared directory younger than this is never collected
RETRY_S = 2.0           # after a failed publish, try again this soon


def _status_has(node: dict, values: dict) -> bool:
    """Whether the node's status capacity and allocatable already hold these quantities (the
    API server may spell them differently: 32000 comes back as "32k")."""
    status = node.get("status") or {}
    for section in ("capacity", "allocatable"):
        have = status.get(section) or {}
        for key, value in values.items():
            try:
                if key not in have or parse_quantity(have[key]) != parse_quantity(value):
                    return False
            except HamiFormatError:
                return False
    return True


class NodePublisher:
    """Keeps the node's annotations in step with the DeviceTable."""

    def __init__(self, cluster: ClusterApi, table: DeviceTable, node_name: str,
                 memory_scaling: float, core_scaling: float, interval: float, *,
                 layout: Optional[L.HostLayout] = None,
                 housekeeping: Optional[Callable[[], None]] = None,
                 clock: Callable[[], float] = time.time, log: Callable[[str], None] = print,
                 on_patch: Optional[Callable[[], None]] = None, mig=None):
        self.cluster, self.table, self.node = cluster, table, node_name
        self.mig = mig
        self.scaling = (memory_scaling, core_scaling)
        self.interval, self.layout = interval, layout
        self.housekeeping = housekeeping or (lambda: None)
        self.clock, self.log = clock, log
        self.on_patch = on_patch or (lambda: None)
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="publisher")

    def desired(self) -> str:
        """The register annotation for the current table."""
        return node_register.encode(self._entries())

    def _entries(self) -> list:
        return register_entries(self.table.states(), self.table.split, *self.scaling,
                                mig=self.mig)

    def publish(self) -> bool:
        """One read-compare-patch; True when something was patched."""
        node = self.cluster.get_node(self.node)
        current = (node.get("metadata") or {}).get("annotations") or {}
        patch = {}
        entries = self._entries()
        want = node_register.encode(entries)
        if current.get(ANNO_NODE_REGISTER) != want:
            patch[ANNO_NODE_REGISTER] = want
        capacity = node_register.capacity(entries)
        stale = not _status_has(node, capacity)
        if stale:
            self.cluster.patch_node_status(self.node, {"capacity": capacity,
                                                       "allocatable": capacity})
            self.on_patch()
        if patch:
            self.cluster.patch_node_annotations(self.node, patch)
            self.on_patch()
        return bool(patch) or stale

    def collect_orphans(self) -> int:
        """Removes the shared directories of pods no longer on this node; returns how many."""
        if self.layout is None:
            return 0
        metas = L.read_container_metas(self.layout)
        if not metas:
            return 0
        present = {(p.get("metadata") or {}).get("uid")
                   for p in self.cluster.list_node_pods(self.node)}
        removed = 0
        for meta in metas:
            if meta.get("uid") not in present and \
                    self.clock() - meta.get("_mtime", 0) > ORPHAN_GRACE_S:
                L.remove_container(self.layout, str(meta.get("uid")), str(meta.get("container")))
                removed += 1
        return removed

    def _tick(self) -> bool:
        try:
            self.publish()
            self.housekeeping()
            self.collect_orphans()
            return True
        except ClusterError as e:
            self.log(f"node annotation refresh failed ({e}); retrying in {RETRY_S:g}s")
            return False

    def _run(self) -> None:
        seen = self.table.version
        while not self._stop.is_set():
            ok = self._tick()
            deadline = time.monotonic() + (self.interval if ok else RETRY_S)
            while not self._stop.is_set() and time.monotonic() < deadline:
                version = self.table.wait_change(seen, min(0.5, self.interval))
                if version != seen or self._poke.is_set():
                    seen = version
                    self._poke.clear()
                    break

    def poke(self) -> None:
        """Publishes within half a second: kubelet registered the plugin again, and a kubelet
        that lost its device checkpoint zeroes every extended resource's capacity, ours too."""
        self._poke.set()

    def start(self) -> "NodePublisher":
        """Publishes now and then periodically."""
        self._thread.start()
        return self

    def alive(self) -> bool:
        """Whether the loop runs."""
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stops the loop."""
        self._stop.set()
        self.table.wake()
        self._thread.join(timeout=5)
