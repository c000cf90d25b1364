"""QuotaStatusWriter: on the leader, writes each namespace's GPU use into the status of its
ResourceQuota objects (HAMi's `limits.nvidia.com/*` keys only), so that `kubectl get quota` and
`kubectl describe quota` show used vs limit beside Kubernetes' own keys.

Why the ResourceQuota status and not an object of our own: Kubernetes' quota controller owns
that status but computes no `limits.<extended resource>` key, and when it updates the status it
keeps the used values it did not compute (masked to the keys in spec.hard); the API server's
quota admission likewise charges only the keys it evaluates. So these keys are ours to write,
and a merge patch of them leaves every other key alone. The writer only compares the status the
watch delivered with the view's usage and patches the quotas that differ: a write conflicts
with nothing, and one lost or overwritten is redone on the next pass.
"""
import logging
import threading
from typing import Callable

from hami_control.cluster.api import ApiError, NotFound
from hami_control.placement.quota import status_patch

log = logging.getLogger(__name__)


class QuotaStatusWriter:
    """Every `period_s`, patches the status of the quotas whose HAMi keys are out of date."""

    def __init__(self, state, api, period_s: float = 5.0,
                 is_leader: Callable[[], bool] = lambda: True):
        self.state, self.api, self.period_s, self.is_leader = state, api, period_s, is_leader
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quota-status", daemon=True)

    def start(self) -> "QuotaStatusWriter":
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
                self.write_once()

    def write_once(self) -> int:
        """One pass; returns how many quotas were patched."""
        written = 0
        for spec, used in self.state.quota_usage():
            patch = status_patch(spec, used)
            if patch is None:
                continue
            try:
                self.api.patch_quota_status(spec.namespace, spec.name, patch)
                written += 1
            except NotFound:
                pass            # deleted meanwhile; the watch will say so
            except ApiError as e:
                log.warning("resourcequota %s/%s: cannot write its GPU use into its status: "
                            "%s (check hami-control's RBAC for resourcequotas/status)",
                            spec.namespace, spec.name, e)
        return written
