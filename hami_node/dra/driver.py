"""Prepare and unprepare: the DRA driver's transaction against the API server and the node's
files. kubelet names a claim by namespace, name and UID only; the allocation is read from the
claim. Calls are serialised (one at a time per node), and both are idempotent: a claim found
in the checkpoint is answered from it, an unknown claim unprepares to nothing."""
import re
import threading
from dataclasses import dataclass, field
from typing import Callable

from hami_node.dra.api import DraApi
from hami_node.dra.claims import (ClaimDevice, PrepareError, Shaping, cdi_ids, cdi_spec,
                                  claim_devices)
from hami_node.dra.slices import SliceOptions
from hami_node.dra.state import PreparedState, devices_of
from hami_node.plugin.devices import DeviceTable
from hami_node.plugin.errors import ClusterError

_UID = re.compile(r"[0-9a-z][0-9a-z-]{0,62}")   # a UID names files: never a path


@dataclass(frozen=True)
class ClaimRef:
    """A claim as kubelet names it."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Prepared:
    """The answer for one claim: its devices and their CDI IDs, or an error."""

    devices: tuple = ()               # ClaimDevice
    cdi_ids: tuple = ()               # per device, a list of CDI IDs
    error: str = ""
    pool: str = field(default="", compare=False)


class DraDriver:
    """Prepares and unprepares claims for one node."""

    def __init__(self, api: DraApi, table: DeviceTable, options: SliceOptions,
                 shaping: Shaping, state: PreparedState, *,
                 log: Callable[[str], None] = print):
        self.api, self.table, self.options = api, table, options
        self.shaping, self.state, self.log = shaping, state, log
        self._lock = threading.Lock()

    def prepare(self, claims) -> dict:
        """Claim UID -> Prepared, for each ClaimRef."""
        with self._lock:
            return {ref.uid: self._prepare_one(ref) for ref in claims}

    def unprepare(self, claims) -> dict:
        """Claim UID -> error text ("" when done)."""
        with self._lock:
            out = {}
            for ref in claims:
                if not _UID.fullmatch(ref.uid):
                    out[ref.uid] = f"claim UID {ref.uid!r} is not a Kubernetes UID"
                    continue
                try:
                    self.state.remove(ref.uid)
                    out[ref.uid] = ""
                    self.log(f"unprepared ResourceClaim {ref.namespace}/{ref.name} ({ref.uid})")
                except OSError as e:
                    out[ref.uid] = f"removing the files of claim {ref.uid} failed: {e}"
            return out

    def _prepare_one(self, ref: ClaimRef) -> Prepared:
        if not _UID.fullmatch(ref.uid):
            return Prepared(error=f"claim UID {ref.uid!r} is not a Kubernetes UID")
        entry = self.state.get(ref.uid)
        if entry is not None:
            return Prepared(tuple(devices_of(entry)), tuple(map(tuple, entry["cdiIds"])),
                            pool=self.options.node)
        what = f"ResourceClaim {ref.namespace}/{ref.name}"
        try:
            claim = self.api.get_claim(ref.namespace, ref.name)
            if claim is None:
                raise PrepareError(f"{what} does not exist (deleted meanwhile?)")
            uid = (claim.get("metadata") or {}).get("uid")
            if uid != ref.uid:
                raise PrepareError(f"{what} has UID {uid}, kubelet asked for {ref.uid}: the "
                                   "claim was deleted and made again; delete the pod")
            devices = claim_devices(claim, self.table, self.options)
            ids = cdi_ids(ref.uid, devices, self.shaping)
            self.state.record(claim, devices, ids,
                              cdi_spec(ref.uid, devices, self.state.layout, self.shaping))
        except (PrepareError, ClusterError) as e:
            self.log(f"prepare of {what} failed: {e}")
            return Prepared(error=str(e))
        except OSError as e:
            self.log(f"prepare of {what} failed writing its files: {e}")
            return Prepared(error=f"{what}: writing its files on the node failed: {e}")
        self.log(f"prepared {what}: " + ", ".join(_describe(d) for d in devices))
        return Prepared(tuple(devices), tuple(map(tuple, ids)), pool=self.options.node)


def _describe(d: ClaimDevice) -> str:
    cores = f"{d.cores} %" if d.cores else "no compute limit"
    return f"{d.uuid} {d.memory >> 20} MiB, {cores}" + (f" (share {d.share_id})"
                                                         if d.share_id else "")
