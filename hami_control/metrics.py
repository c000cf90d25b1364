"""GET /metrics: HAMi's scheduler metrics (same names and labels, so HAMi's dashboards work),
plus hami-control's own latency histograms and result counters.

HAMi's gauges are computed at scrape time from the cluster view (one pass under the state
lock), so they are exactly what placement sees. Memory is in bytes, as HAMi reports it.
"""
from typing import Callable, Optional

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from hami_control.placement.quota import KEYS as QUOTA_KEYS, PREFIX as QUOTA_PREFIX

MIB = 1 << 20
ZONE = "vGPU"
_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25,
            0.5, 1.0, 2.5)
_DEVICE_LABELS = ["deviceidx", "deviceuuid", "nodeid", "zone"]
_CONTAINER_LABELS = ["containeridx", "deviceuuid", "nodename", "podname", "podnamespace", "zone"]


class AllocationCollector:
    """HAMi's per-GPU and per-container allocation gauges, from a SchedulerState."""

    def __init__(self, state, status: Optional[Callable[[], dict]] = None):
        self.state, self.status = state, status or (lambda: {})

    def _snapshot(self) -> tuple:
        with self.state.lock:
            nodes = [(n.name, [(d.index, d.uuid, d.devcore, d.devmem, d.usedcores, d.usedmem,
                                d.used) for d in n.devices]) for n in self.state.view.nodes]
            reservations = self.state.view.reservations()
        return nodes, reservations

    def collect(self):
        """The metric families (called by the registry at each scrape)."""
        nodes, reservations = self._snapshot()
        yield from self._devices(nodes)
        yield from self._containers(reservations)
        yield from self._quotas(self.state.namespace_quotas())
        yield from self._claims(self.state.claims.claims())
        for name, (help_text, value) in self.status().items():
            family = GaugeMetricFamily(name, help_text)
            family.add_metric([], value)
            yield family
        count = GaugeMetricFamily("hami_control_nodes", "Nodes with registered GPUs")
        count.add_metric([], len(nodes))
        yield count

    @staticmethod
    def _devices(nodes):
        fams = {name: GaugeMetricFamily(name, text, labels=labels) for name, text, labels in (
            ("GPUDeviceCoreLimit", "GPU cores (percent) a GPU offers", _DEVICE_LABELS),
            ("GPUDeviceMemoryLimit", "GPU memory (bytes) a GPU offers", _DEVICE_LABELS),
            ("GPUDeviceCoreAllocated", "GPU cores (percent) allocated on a GPU", _DEVICE_LABELS),
            ("GPUDeviceMemoryAllocated", "GPU memory (bytes) allocated on a GPU",
             ["devicecores"] + _DEVICE_LABELS),
            ("GPUDeviceSharedNum", "Containers sharing a GPU", _DEVICE_LABELS))}
        for node, devices in nodes:
            for index, uuid, devcore, devmem, usedcores, usedmem, used in devices:
                labels = [str(index), uuid, node, ZONE]
                fams["GPUDeviceCoreLimit"].add_metric(labels, devcore)
                fams["GPUDeviceMemoryLimit"].add_metric(labels, devmem * MIB)
                fams["GPUDeviceCoreAllocated"].add_metric(labels, usedcores)
                fams["GPUDeviceMemoryAllocated"].add_metric([str(usedcores)] + labels,
                                                            usedmem * MIB)
                fams["GPUDeviceSharedNum"].add_metric(labels, used)
        yield from fams.values()

    @staticmethod
    def _containers(reservations):
        cores = GaugeMetricFamily("vGPUCoreAllocated", "GPU cores (percent) given to a "
                                  "container on a GPU", labels=_CONTAINER_LABELS)
        memory = GaugeMetricFamily("vGPUMemoryAllocated", "GPU memory (bytes) given to a "
                                   "container on a GPU", labels=_CONTAINER_LABELS)
        legacy = GaugeMetricFamily("vGPUPodsDeviceAllocated", "GPU memory (bytes) given to a "
                                   "container on a GPU (HAMi's older name)",
                                   labels=["containeridx", "deviceusedcore", "deviceuuid",
                                           "nodename", "podname", "podnamespace", "zone"])
        for r in reservations:
            namespace, _, pod = r.pod.partition("/")
            for index, ctr in enumerate(r.devices):
                for d in ctr:
                    labels = [str(index), d.uuid, r.node, pod, namespace, ZONE]
                    cores.add_metric(labels, d.usedcores)
                    memory.add_metric(labels, d.usedmem * MIB)
                    legacy.add_metric([str(index), str(d.usedcores), d.uuid, r.node, pod,
                                       namespace, ZONE], d.usedmem * MIB)
        yield from (cores, memory, legacy)


    @staticmethod
    def _claims(claims):
        """What each allocated DRA claim of our driver holds per GPU (kube-scheduler allocated
        it; these are its consumedCapacity)."""
        labels = ["namespace", "claim", "nodename", "device"]
        memory = GaugeMetricFamily("hami_dra_claim_memory_bytes", "GPU memory (bytes) a DRA "
                                   "claim consumed of a GPU", labels=labels)
        cores = GaugeMetricFamily("hami_dra_claim_cores", "GPU cores (percent) a DRA claim "
                                  "consumed of a GPU", labels=labels)
        for claim in claims:
            for d in claim.devices:
                values = [claim.namespace, claim.name, d.node, d.device]
                memory.add_metric(values, d.mem * MIB)
                cores.add_metric(values, d.cores)
        yield from (memory, cores)

    @staticmethod
    def _quotas(namespaces):
        """HAMi's per-namespace quota gauges: quota_name is the resource (nvidia.com/gpumem),
        the limit also a label of `_used` as HAMi has it; the lowest limit of a namespace's
        quotas, as that is the one enforced."""
        used = GaugeMetricFamily("hami_resource_quota_used", "GPU quota a namespace uses "
                                 "(GPUs, MiB or percent cores, as placed)",
                                 labels=["namespace", "quota_name", "limit"])
        limit = GaugeMetricFamily("hami_resource_quota_limit", "GPU quota of a namespace "
                                  "(the lowest of its ResourceQuotas)",
                                  labels=["namespace", "quota_name"])
        for namespace, limits, amount in namespaces:
            for key, value in zip(QUOTA_KEYS, amount):
                if key in limits:
                    name = key[len(QUOTA_PREFIX):]
                    used.add_metric([namespace, name, str(limits[key])], value)
                    limit.add_metric([namespace, name], limits[key])
        yield from (used, limit)


class ControlMetrics:
    """The registry /metrics serves, with the latency histograms and result counters."""

    def __init__(self, registry: Optional[CollectorRegistry] = None):
        self.registry = registry or CollectorRegistry()
        self.latency = {
            verb: Histogram(f"hami_control_{verb}_seconds", f"Time to answer a {verb} call",
                            buckets=_BUCKETS, registry=self.registry)
            for verb in ("filter", "bind", "preempt", "prioritize", "webhook")}
        self.results = Counter("hami_control_results", "Answers by endpoint and result",
                               ["endpoint", "result"], registry=self.registry)

    def observe(self, verb: str, seconds: float) -> None:
        """Records one call's latency."""
        histogram = self.latency.get(verb)
        if histogram is not None:
            histogram.observe(seconds)

    def result(self, endpoint: str, result: str) -> None:
        """Counts one answer."""
        self.results.labels(endpoint, result).inc()

    def watch(self, state, status: Optional[Callable[[], dict]] = None) -> None:
        """Adds HAMi's allocation gauges for a state (and status gauges: name -> (help, value))."""
        self.registry.register(AllocationCollector(state, status))

    def render(self) -> bytes:
        """The text exposition."""
        return generate_latest(self.registry)
