"""/metrics: HAMi's metric names (so its dashboards work) plus the agent's own health.

HAMi's names and labels (its vGPU monitor):
  HostGPUMemoryUsage, HostCoreUtilization            {nodeid, deviceidx, deviceuuid, devicetype}
  vGPU_device_memory_usage_in_bytes, vGPU_device_memory_limit_in_bytes,
  Device_utilization_desc_of_container, Device_last_kernel_of_container
                                         {podnamespace, podname, ctrname, vdeviceid, deviceuuid}
  Device_memory_desc_of_container        the same + {context, module, data, offset}
The per-container figures come from each container's shared file (read through the shim's
Python API, injected as a UsageReader); the limits from what Allocate handed out. A prepared
DRA claim counts as one more "container": its name as podname, an empty ctrname, its limits
from its allocation (the claim's shared file is shared by every container using it).
"""
import threading
import time
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from pathlib import Path
from typing import Callable, Optional, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily

from hami_common.node_register import device_type_name
from hami_node.plugin import layout as L
from hami_node.plugin.backend import DeviceBackend
from hami_node.plugin.devices import DeviceTable

MIB = 1 << 20
HOST_LABELS = ["nodeid", "deviceidx", "deviceuuid", "devicetype"]
CTR_LABELS = ["podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid"]


@dataclass(frozen=True)
class DeviceUse:
    """One device as a container's shared file records it."""

    used: int               # bytes
    limit: int = 0          # bytes (0: not recorded; the Allocate limit is used)
    pids: tuple = ()        # the container's processes using it, as this agent's /proc sees them
    context: int = 0        # bytes of `used` (0 when the shim does not break it down)
    module: int = 0
    data: int = 0
    sm_share: Optional[float] = None   # percent of device time, measured by the shim's limiter
                                       # (None: no limiter runs, NVML per-process use instead)


@dataclass(frozen=True)
class ContainerUse:
    """A container's devices by GPU UUID, and when it last launched a kernel."""

    devices: dict
    last_kernel: float = 0.0   # unix seconds, 0 when unknown


class UsageReader(Protocol):
    """Reads one container's shared file."""

    def __call__(self, path: Path) -> Optional[ContainerUse]:
        """The usage, or None when the file is absent or unreadable."""


def no_usage(path: Path) -> Optional[ContainerUse]:
    """A reader for when the shim's Python side is unavailable: no usage figures."""
    return None


class NodeCollector:
    """Collects HAMi's GPU and container metrics at scrape time."""

    def __init__(self, node: str, backend: DeviceBackend, table: DeviceTable,
                 layout: L.HostLayout, reader: UsageReader = no_usage,
                 clock: Callable[[], float] = time.time, mig=None):
        self.node, self.backend, self.table = node, backend, table
        self.layout, self.reader, self.clock = layout, reader, clock
        self.mig = mig          # MigManager when some GPUs are served as MIG

    def describe(self):
        """Nothing is described up front, so registering never touches NVML."""
        return []

    def collect(self):
        """One scrape's families."""
        yield from self._host()
        yield from self._containers()
        healthy = GaugeMetricFamily("hami_node_gpu_healthy", "1 when the GPU's virtual devices "
                                    "are advertised Healthy", labels=HOST_LABELS[:3])
        for s in self.table.states():
            healthy.add_metric([self.node, str(s.gpu.index), s.gpu.uuid], 1 if s.healthy else 0)
        yield healthy
        if self.mig is not None:
            yield from self._mig()

    def _mig(self):
        """Per MIG GPU, its instances (count by profile) and each instance's identity and
        placement, as the node's NVML reports them."""
        count = GaugeMetricFamily("hami_node_gpu_mig_instances", "MIG instances on the GPU, by "
                                  "profile", labels=HOST_LABELS[:3] + ["profile"])
        info = GaugeMetricFamily("hami_node_gpu_mig_instance_info", "One MIG instance: its "
                                 "profile, placement and MIG UUID",
                                 labels=HOST_LABELS[:3] + ["profile", "placement_start",
                                                           "placement_size", "mig_uuid"])
        index = {s.gpu.uuid: str(s.gpu.index) for s in self.table.states()}
        for uuid, instances in self.mig.instances().items():
            by_profile = {}
            for inst in instances:
                by_profile[inst.profile] = by_profile.get(inst.profile, 0) + 1
                info.add_metric([self.node, index.get(uuid, ""), uuid, inst.profile,
                                 str(inst.placement.start), str(inst.placement.size),
                                 inst.mig_uuid], 1)
            for profile, n in sorted(by_profile.items()):
                count.add_metric([self.node, index.get(uuid, ""), uuid, profile], n)
        yield count
        yield info

    def _host(self):
        memory = GaugeMetricFamily("HostGPUMemoryUsage", "GPU device memory usage",
                                   labels=HOST_LABELS)
        cores = GaugeMetricFamily("HostCoreUtilization", "GPU core utilization",
                                  labels=HOST_LABELS)
        for use in self.backend.usage():
            labels = [self.node, str(use.index), use.uuid, device_type_name(use.name)]
            memory.add_metric(labels, use.memory_used)
            cores.add_metric(labels, use.utilization)
        return memory, cores

    def _containers(self):
        f = {"usage": GaugeMetricFamily("vGPU_device_memory_usage_in_bytes", "vGPU device usage",
                                        labels=CTR_LABELS),
             "limit": GaugeMetricFamily("vGPU_device_memory_limit_in_bytes", "vGPU device limit",
                                        labels=CTR_LABELS),
             "desc": GaugeMetricFamily("Device_memory_desc_of_container",
                                       "Container device memory description",
                                       labels=CTR_LABELS + ["context", "module", "data", "offset"]),
             "util": GaugeMetricFamily("Device_utilization_desc_of_container",
                                       "Container device utilization description",
                                       labels=CTR_LABELS),
             "last": GaugeMetricFamily("Device_last_kernel_of_container",
                                       "Seconds since the container's last kernel launch",
                                       labels=CTR_LABELS)}
        utilization = {}   # per scrape, one NVML query per GPU at most
        for namespace, name, ctr, cache, devices in self._users():
            use = self.reader(cache)
            for i, (uuid, limit) in enumerate(devices):
                labels = [namespace, name, ctr, str(i), uuid]
                recorded = use.devices.get(uuid) if use else None
                f["limit"].add_metric(labels, recorded.limit if recorded and recorded.limit
                                      else limit)
                if recorded is not None:
                    self._device(f, labels, recorded, use.last_kernel, utilization)
        return tuple(f.values())

    def _users(self):
        """(namespace, pod, container, shared file, [(GPU UUID, limit bytes)]) of every
        container given GPUs by Allocate, and of every prepared DRA claim: its name stands for
        the pod (a claim may serve several pods) and the container is empty."""
        for meta in L.read_container_metas(self.layout):
            uid, ctr = str(meta.get("uid")), str(meta.get("container"))
            yield (str(meta.get("namespace")), str(meta.get("pod")), ctr,
                   self.layout.container_dir(uid, ctr) / L.CACHE_FILE,
                   [(str(d.get("uuid")), int(d.get("memory_mib", 0)) * MIB)
                    for d in meta.get("devices") or []])
        for meta in L.read_claim_metas(self.layout):
            yield (str(meta.get("namespace")), str(meta.get("name")), "",
                   self.layout.claim_dir(meta["_uid"]) / L.CACHE_FILE,
                   [(str(d.get("uuid")), int(d.get("memory", 0)))
                    for d in meta.get("devices") or []])

    def _device(self, f: dict, labels: list, recorded: DeviceUse, last_kernel: float,
                utilization: dict) -> None:
        """The figures of one container device that its shared file recorded."""
        f["usage"].add_metric(labels, recorded.used)
        offset = max(recorded.used - recorded.context - recorded.module - recorded.data, 0)
        f["desc"].add_metric(labels + [str(recorded.context), str(recorded.module),
                                       str(recorded.data), str(offset)], recorded.used)
        if recorded.sm_share is not None:
            # The container's own measurement: needs no mapping of its pids to the host's.
            f["util"].add_metric(labels, recorded.sm_share)
        elif recorded.pids:
            # Only processes this agent can see: NVML reports them by its pids.
            uuid = labels[-1]
            if uuid not in utilization:
                utilization[uuid] = self.backend.process_utilization(uuid)
            f["util"].add_metric(labels, sum(utilization[uuid].get(pid, 0)
                                             for pid in recorded.pids))
        if last_kernel > 0:
            f["last"].add_metric(labels, max(0.0, self.clock() - last_kernel))


class AgentMetrics:
    """The agent's own counters, in a registry of their own (no process-wide globals)."""

    def __init__(self, registry: Optional[CollectorRegistry] = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.allocations = Counter("hami_node_allocations", "Allocate calls by result",
                                   ["result"], registry=r)
        self.allocate_seconds = Histogram("hami_node_allocate_seconds", "Allocate latency",
                                          buckets=(.002, .005, .01, .02, .05, .1, .25, 1, 5),
                                          registry=r)
        self.registrations = Counter("hami_node_registrations", "Registrations with kubelet",
                                     registry=r)
        self.xids = Counter("hami_node_xid_events", "XID events seen",
                            ["deviceuuid", "xid", "critical"], registry=r)
        self.annotation_patches = Counter("hami_node_annotation_patches",
                                          "Node annotation patches (only when changed)",
                                          registry=r)
        self.up = Gauge("hami_node_up", "1 while the agent serves kubelet", registry=r)
        self.over_cap = Gauge("hami_container_memory_over_cap_bytes",
                              "GPU memory a container uses over its cap, by the driver's count "
                              "(processes that bypass the shim)",
                              ["podnamespace", "podname", "ctrname", "deviceuuid"], registry=r)
        self.over_share = Gauge("hami_container_compute_over_share_percent",
                                "Percentage points of a GPU's time a container used over its "
                                "gpucores, by the driver's count over the last check's window "
                                "(processes that bypass the shim's limiter)",
                                ["podnamespace", "podname", "ctrname", "deviceuuid"], registry=r)

    def observe_over_cap(self, offenders) -> None:
        """The containers over their caps in the latest check (others are cleared)."""
        self.over_cap.clear()
        for o in offenders:
            self.over_cap.labels(o.namespace, o.pod, o.container, o.gpu).set(o.used - o.cap)

    def observe_over_share(self, offenders) -> None:
        """The containers over their compute shares in the latest check (others are cleared)."""
        self.over_share.clear()
        for o in offenders:
            self.over_share.labels(o.namespace, o.pod, o.container, o.gpu).set(o.share - o.cap)

    def observe_allocate(self, result: str, seconds: float) -> None:
        """Counts one Allocate."""
        self.allocations.labels(result).inc()
        self.allocate_seconds.observe(seconds)

    def observe_xid(self, event, critical: bool) -> None:
        """Counts one XID event."""
        self.xids.labels(event.uuid or "unknown", str(event.xid), str(critical).lower()).inc()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        """Scrapes are not worth a log line each."""


class _MetricsServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def serve(registry: CollectorRegistry, address: str):
    """Serves /metrics on HOST:PORT (IPv4) from a daemon thread; returns (server, bound port).
    Polls for shutdown every 50 ms, so stopping the agent does not wait half a second."""
    host, _, port = address.rpartition(":")
    server = make_server(host or "0.0.0.0", int(port), make_wsgi_app(registry), _MetricsServer,
                         handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True, name="metrics").start()
    return server, server.server_port
