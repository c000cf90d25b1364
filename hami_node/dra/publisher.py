"""Keeps the node's ResourceSlice in step with its GPUs and their health.

Every `interval` seconds, at once when a GPU's health changes and when kubelet registers the
driver (kubelet deletes the node's slices when it starts, and a while after a driver went
away), it compares the stored slice with what it last wrote: a slice missing, changed by
someone else or no longer what the GPUs say is written again under the next pool generation.
Slices of this driver and node under other names are removed.

Consumable capacity is asked for, and checked on the slice the API server stored: with the
DRAConsumableCapacity gate off there, the API server drops `allowMultipleAllocations` and the
request policies without an error. The publisher then says so in the log and publishes whole
devices (a claim gets a whole GPU, with no memory or compute cap).
"""
import time
from dataclasses import replace
from typing import Callable

from hami_node.dra.api import DraApi
from hami_node.dra.slices import SliceOptions, build_slice, consumable_kept, slice_name
from hami_node.dra.state import PreparedState
from hami_node.plugin.devices import DeviceTable
from hami_node.plugin.errors import ClusterError
from hami_node.plugin.worker import Worker

RETRY_S = 2.0
ORPHAN_GRACE_S = 60.0
FALLBACK_HINT = (
    "the API server dropped allowMultipleAllocations from our ResourceSlice: the "
    "DRAConsumableCapacity feature gate is off there. GPUs are published as whole devices now "
    "(each claim gets a whole GPU, with no memory or compute cap); turn the gate on in "
    "kube-apiserver, kube-controller-manager, kube-scheduler and kubelet, then restart hami-node "
    "to share GPUs")


class SlicePublisher(Worker):
    """The node's ResourceSlice writer (see the module's doc)."""

    def __init__(self, api: DraApi, table: DeviceTable, options: SliceOptions,
                 interval: float, state: PreparedState, *, log: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.time):
        super().__init__("slice-publisher")
        self.api, self.table, self.options = api, table, options
        self.interval, self.state, self.log, self.clock = interval, state, log, clock
        self.generation = 0
        self.writes = 0
        self._sent = None          # (spec we wrote, resourceVersion it got)
        self._poke = False

    def _desired(self) -> dict:
        return build_slice(self.table.states(), self.options, self.generation)

    def _write(self, current) -> dict:
        self.generation = max(self.generation,
                              ((current or {}).get("spec") or {}).get("pool", {})
                              .get("generation", 0)) + 1
        body = self._desired()
        if current is None:
            stored = self.api.create_slice(body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            stored = self.api.replace_slice(body)
        self.writes += 1
        return body, stored

    def reconcile(self) -> bool:
        """One comparison and, when needed, one write; True when it wrote."""
        name = slice_name(self.options)
        current = self.api.get_slice(name)
        want = self._desired()["spec"]
        if current is not None and self._sent is not None and \
                self._sent == (_unversioned(want), current["metadata"].get("resourceVersion")):
            self._remove_others(name)
            return False
        body, stored = self._write(current)
        if not consumable_kept(body, stored):
            self.log(FALLBACK_HINT)
            self.options = replace(self.options, consumable=False)
            body, stored = self._write(stored)
        self._sent = (_unversioned(body["spec"]), stored["metadata"].get("resourceVersion"))
        self.log(f"ResourceSlice {name} written (generation {self.generation}, "
                 f"{len(body['spec']['devices'])} device(s), "
                 f"{'shareable' if self.options.consumable else 'whole'})")
        self._remove_others(name)
        return True

    def _remove_others(self, name: str) -> None:
        for other in self.api.node_slices(self.options.node, self.options.driver):
            if other["metadata"]["name"] != name:
                self.api.delete_slice(other["metadata"]["name"])

    def _run(self) -> None:
        seen = self.table.version
        while not self._stop.is_set():
            try:
                self.reconcile()
                self.state.collect_orphans(self.clock, ORPHAN_GRACE_S)
                wait = self.interval
            except ClusterError as e:
                self.log(f"ResourceSlice update failed ({e}); retrying in {RETRY_S:g}s")
                wait = RETRY_S
            deadline = time.monotonic() + wait
            while not self._stop.is_set() and time.monotonic() < deadline:
                version = self.table.wait_change(seen, 0.25)
                if version != seen or self._poke:
                    seen, self._poke = version, False
                    break

    def poke(self) -> None:
        """Reconciles within a quarter second (kubelet registered us: it may have wiped the
        node's slices when it started)."""
        self._poke = True

    def stop(self) -> None:
        """Stops the loop; the slice stays (kubelet removes it once we are gone a while)."""
        self._stop.set()
        self.table.wake()
        self._thread.join(timeout=self.join_s)


def _unversioned(spec: dict) -> dict:
    pool = {k: v for k, v in spec["pool"].items() if k != "generation"}
    return {**spec, "pool": pool}
