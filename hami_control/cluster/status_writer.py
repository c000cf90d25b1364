"""StatusWriter: on the leader, shows what hami-control allocated where kubectl shows it.

- Each namespace's GPU use goes into the status of its ResourceQuota objects (HAMi's
  `limits.nvidia.com/*` keys only), so that `kubectl get quota` and `kubectl describe quota`
  show used vs limit beside Kubernetes' own keys. Why that status and not an object of our own:
  Kubernetes' quota controller owns it but computes no `limits.<extended resource>` key, and
  when it updates the status it keeps the used values it did not compute (masked to the keys in
  spec.hard); the API server's quota admission likewise charges only the keys it evaluates. So
  these keys are ours to write, and a merge patch of them leaves every other key alone.
- Each GPU node gets a one-line summary in the annotation `hami.io/node-gpu-allocated`, which
  `kubectl describe node` lists (capacity itself is node status, written by hami-node).

Each pass only compares what the watches delivered with the view and patches what differs: a
write conflicts with nothing, and one lost or overwritten is redone on the next pass.
"""
import logging
import threading
from typing import Callable, Optional

from hami_common.constants import ANNO_NODE_GPU_SUMMARY
from hami_control.cluster.api import ApiError, NotFound
from hami_control.placement.quota import status_patch

log = logging.getLogger(__name__)


class StatusWriter:
    """Every `period_s`, patches the quotas and node summaries that are out of date."""

    def __init__(self, state, api, period_s: float = 5.0,
                 is_leader: Callable[[], bool] = lambda: True, quotas: bool = True,
                 node_info: Optional[Callable] = None):
        self.state, self.api, self.period_s, self.is_leader = state, api, period_s, is_leader
        self.quotas, self.node_info = quotas, node_info
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-writer", daemon=True)

    def start(self) -> "StatusWriter":
        """Starts the loop (a period of 0 writes nothing)."""
        if self.period_s:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the loop."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            if self.is_leader():
                if self.quotas:
                    self.write_quotas()
                if self.node_info is not None:
                    self.write_nodes()

    def write_quotas(self) -> int:
        """One pass over the quotas; returns how many were patched."""
        written = 0
        for spec, used in self.state.quota_usage():
            patch = status_patch(spec, used)
            if patch is not None:
                written += self._write(f"resourcequota {spec.namespace}/{spec.name}",
                                       self.api.patch_quota_status, spec.namespace, spec.name,
                                       patch)
        return written

    def write_nodes(self) -> int:
        """One pass over the GPU nodes; returns how many summaries were patched."""
        written = 0
        for name, summary in self.state.node_summaries().items():
            info = self.node_info(name)
            if info is not None and info.summary != summary:
                written += self._write(f"node {name}", self.api.patch_node_annotations, name,
                                       {ANNO_NODE_GPU_SUMMARY: summary})
        return written

    @staticmethod
    def _write(what: str, patch, *args) -> int:
        try:
            patch(*args)
            return 1
        except NotFound:
            return 0            # deleted meanwhile; the watch will say so
        except ApiError as e:
            log.warning("%s: cannot write what hami-control allocated: %s (check hami-control's "
                        "RBAC: resourcequotas/status and nodes patch)", what, e)
            return 0
