"""Events on pods: what a user sees in `kubectl describe pod` when hami-control cannot do its
part (a failed bind, a pod its webhook never saw), and what preemption did."""
import logging
from datetime import datetime

from hami_control.cluster.api import ApiError

log = logging.getLogger(__name__)


def warn_pod(api, component: str, now: datetime, namespace: str, name: str, uid: str,
             reason: str, message: str) -> None:
    """Records a Warning Event on the pod; a failure to record it is logged, never raised."""
    pod_event(api, component, now, namespace, name, uid, reason, message, "Warning")


def pod_event(api, component: str, now: datetime, namespace: str, name: str, uid: str,
              reason: str, message: str, type_: str = "Normal") -> None:
    """Records an Event of that type on the pod; a failure is logged, never raised."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {"apiVersion": "v1", "kind": "Event",
             "metadata": {"generateName": f"{name}.", "namespace": namespace},
             "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name,
                                "namespace": namespace, "uid": uid},
             "reason": reason, "message": message[:1024], "type": type_,
             "source": {"component": component}, "reportingComponent": component,
             "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}
    try:
        api.create_event(namespace, event)
    except ApiError as e:
        log.warning("could not record an Event on pod %s/%s: %s", namespace, name, e)
