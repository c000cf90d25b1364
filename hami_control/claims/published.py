"""The GPUs hami-py's DRA driver publishes (its ResourceSlices), read now and then: the memory
sizes a `gpumem-percentage` may take, and the memory of a GPU allocated whole."""
import logging
import threading

from hami_common.constants import DRA_DRIVER
from hami_common.dra_request import published_sizes
from hami_common.request import DeviceFilters
from hami_control.clock import Clock, SystemClock
from hami_control.cluster.api import ApiError
from hami_control.cluster.dra_templates import published_gpus

log = logging.getLogger(__name__)
_SIZES_KEPT = 1024


class PublishedGpus:
    """A cache of the driver's slices, listed again when older than `ttl_s`; a failed list
    keeps the last answer (and says so)."""

    def __init__(self, api, clock: Clock = SystemClock(), ttl_s: float = 30.0):
        self.api, self.clock, self.ttl_s = api, clock, ttl_s
        self._lock = threading.Lock()
        self._at = None
        self._slices: list = []
        self._gpus: list = []         # published_gpus(self._slices), read once per list
        self._sizes: dict = {}        # DeviceFilters -> published_sizes, once per list

    def _fresh(self) -> list:
        with self._lock:
            now = self.clock.monotonic()
            if self._at is None or now - self._at >= self.ttl_s:
                try:
                    self._slices = self.api.list_slices(DRA_DRIVER)
                    # Read once per list: the quota gate asks on every event of a
                    # percentage pod, and 1,213 slices take ~50 ms to read.
                    self._gpus = published_gpus(self._slices)
                    self._sizes = {}
                except ApiError as e:
                    log.warning("listing the ResourceSlices of %s failed (%s); using the last "
                                "list", DRA_DRIVER, e)
                self._at = now
            return self._slices

    def gpus(self) -> list:
        """(type, UUID, memory MiB) of every published GPU."""
        self._fresh()
        with self._lock:
            return list(self._gpus)

    def sizes(self, filters: DeviceFilters) -> list:
        """The distinct memory sizes (MiB) of the published GPUs the filters allow, worked out
        once per list and filters: the quota gate asks on every event of a percentage pod,
        and going over the 1,213 openb nodes' GPUs each time was a fifth of hami-control's
        CPU in bench/k8s_throughput.py's run with node scores."""
        self._fresh()
        with self._lock:
            found = self._sizes.get(filters)
            if found is None:
                if len(self._sizes) >= _SIZES_KEPT:
                    self._sizes.clear()
                found = self._sizes[filters] = published_sizes(self._gpus, filters)
            return list(found)

    def whole_mib(self, pool: str, device: str) -> int:
        """The memory (MiB) a device of a pool publishes; 0 if not published."""
        for item in self._fresh():
            spec = item.get("spec") or {}
            if (spec.get("pool") or {}).get("name") != pool:
                continue
            for found in published_gpus([{"spec": {"devices": [
                    d for d in spec.get("devices") or [] if d.get("name") == device]}}]):
                return found[2]
        return 0
