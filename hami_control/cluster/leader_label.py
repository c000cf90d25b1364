"""Labels the leader's own pod, so that the extender's Service reaches only the leader.

Readiness means "can serve" (a rolling update needs its surge pod Ready while the old pod still
leads), so the Service that kube-scheduler calls cannot select on readiness to find the leader.
It selects on LABEL_CONTROL_LEADER instead: set on this pod while it leads, removed when it
stops. A replica that loses the Lease without reaching the API server keeps a stale label; it
then answers filter and bind with a refusal and closes the connection (server/app.py), so that
kube-scheduler's next attempt goes through the Service again.
"""
import logging
import threading

from hami_common.constants import LABEL_CONTROL_LEADER
from hami_control.cluster.api import ApiError

log = logging.getLogger(__name__)


class LeaderLabel:
    """on_change(leading) for LeaderElector: patches the pod's label; retried on the next
    change or by retry() when a patch failed."""

    def __init__(self, api, namespace: str, pod: str):
        self.api, self.namespace, self.pod = api, namespace, pod
        self._lock = threading.Lock()
        self.labelled = None        # what the pod carries as far as we know; None: unknown

    def __call__(self, leading: bool) -> None:
        with self._lock:
            try:
                self.api.patch_pod_labels(self.namespace, self.pod,
                                          {LABEL_CONTROL_LEADER: "true" if leading else None})
                self.labelled = leading
            except ApiError as e:
                self.labelled = None
                log.error("could not %s label %s on pod %s/%s: %s (hami-control's Role needs "
                          "patch on pods in its namespace; the extender's Service finds the "
                          "leader by this label)", "set" if leading else "remove",
                          LABEL_CONTROL_LEADER, self.namespace, self.pod, e)
