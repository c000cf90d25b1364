"""The ResourceClaimTemplates of pods the webhook turned to DRA, made once the pod exists.

The webhook names a template per GPU container and records what it holds in the pod's
`hami.io/dra-claims` (admission runs before the pod has the UID its owner reference needs).
For every pod event of the sync carrying that annotation, and not made yet, a worker creates
the templates owned by the pod (garbage collection deletes them with it); kube-scheduler waits
for the claims meanwhile and Kubernetes' resourceclaim controller retries the pod. Every
replica does it (an existing template is fine), so no leader change can strand a pod. A
template that cannot be written gets a Warning Event on the pod saying why.
"""
import logging
import queue
import threading
from typing import Callable, Optional

from hami_common.constants import DRA_DRIVER, DRA_MEMORY
from hami_common.dra_request import claim_devices, published_sizes
from hami_common.errors import HamiFormatError, RequestError
from hami_common.quantity import parse_quantity
from hami_common.request import DeviceFilters, parse_filters
from hami_control.clock import Clock, SystemClock
from hami_control.cluster.api import ApiError, Conflict
from hami_control.cluster.events import warn_pod
from hami_control.webhook.claims import template_labels
from hami_control.webhook.dra import recorded_asks

log = logging.getLogger(__name__)
REASON = "GPUClaimTemplateFailed"
RETRY_S = 2.0
_REMEMBERED = 10000


def published_gpus(slices) -> list:
    """(type, UUID, memory MiB) of every GPU the driver's slices publish."""
    out = []
    for item in slices:
        for device in (item.get("spec") or {}).get("devices") or []:
            attrs = device.get("attributes") or {}
            raw = ((device.get("capacity") or {}).get(DRA_MEMORY) or {}).get("value")
            try:
                out.append((str((attrs.get("type") or {}).get("string", "")),
                            str((attrs.get("uuid") or {}).get("string", "")),
                            int(parse_quantity(raw)) >> 20))
            except (HamiFormatError, TypeError):
                continue
    return out


def templates_for(pod: dict, sizes: Callable[[DeviceFilters], list]) -> list:
    """The pod's templates, owned by it; RequestError when one cannot be written. `sizes`:
    the published memory sizes its filters allow (`published_sizes`), asked only for a
    memory percentage."""
    meta = pod.get("metadata") or {}
    asks = recorded_asks(pod)
    filters = parse_filters(meta.get("annotations") or {})
    needs_sizes = any(a.mem_percent and not a.mem_mib for a in asks.values())
    known = sizes(filters) if needs_sizes else []
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"),
             "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True}
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": name, "namespace": meta.get("namespace"),
                          "ownerReferences": [owner]},
             "spec": {"metadata": {"labels": template_labels()},
                      "spec": {"devices": claim_devices(ask, filters, known)}}}
            for name, ask in sorted(asks.items())]


class DraTemplates:
    """on_pod(pod, deleted) from the sync; creates the templates from its own thread."""

    def __init__(self, api, clock: Clock = SystemClock(), component: str = "hami-control",
                 sizes: Optional[Callable[[DeviceFilters], list]] = None):
        self.api, self.clock, self.component = api, clock, component
        # The published memory sizes a percentage may take: the service passes its cache
        # (claims/published.py). Listing the slices per pod cost 1,213 slices read per
        # percentage pod (bench/k8s_throughput.py: most of hami-control's CPU in that run).
        self.sizes = sizes or (lambda filters: published_sizes(
            published_gpus(api.list_slices(DRA_DRIVER)), filters))
        self._made: set = set()          # pod UIDs whose templates exist
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="dra-templates")

    def on_pod(self, pod: dict, deleted: bool) -> None:
        """Queues a pod whose templates are still to be made."""
        uid = (pod.get("metadata") or {}).get("uid")
        if deleted:
            self._made.discard(uid)
        elif uid and uid not in self._made and recorded_asks(pod):
            self._queue.put(pod)

    def make(self, pod: dict) -> bool:
        """Creates the pod's templates; True when they all exist."""
        meta = pod.get("metadata") or {}
        try:
            for template in templates_for(pod, self.sizes):
                try:
                    self.api.create_claim_template(meta.get("namespace"), template)
                except Conflict:
                    pass          # made already (by us, or by another replica)
        except RequestError as e:
            warn_pod(self.api, self.component, self.clock.now(), meta.get("namespace"),
                     meta.get("name"), meta.get("uid"), REASON, str(e))
            return True           # nothing more to do until the pod is made again
        except ApiError as e:
            log.warning("creating the claim templates of pod %s/%s failed (%s); retrying",
                        meta.get("namespace"), meta.get("name"), e)
            return False
        if len(self._made) > _REMEMBERED:
            self._made.clear()
        self._made.add(meta.get("uid"))
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pod = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if (pod.get("metadata") or {}).get("uid") in self._made:
                continue
            if not self.make(pod) and not self._stop.wait(RETRY_S):
                self._queue.put(pod)

    def start(self) -> "DraTemplates":
        """Starts the worker."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the worker."""
        self._stop.set()
        self._thread.join(timeout=5)
