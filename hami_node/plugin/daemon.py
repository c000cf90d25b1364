"""NodeAgent: every part of hami-node wired together, with production defaults for each
boundary (NVML, the Kubernetes client, systemd) and the option to inject them."""
import threading
from pathlib import Path
from typing import Callable, Optional

from hami_node.plugin.allocate import Limits
from hami_node.plugin.allocator import Allocator
from hami_node.plugin.backend import DeviceBackend
from hami_node.plugin.cluster import ClusterApi
from hami_node.plugin.config import NodeConfig
from hami_node.plugin.devices import DeviceTable, select_gpus
from hami_node.plugin.errors import ClusterError, NodeAgentError
from hami_node.plugin.health import HealthMonitor
from hami_node.plugin.layout import HostLayout
from hami_node.plugin.metrics import AgentMetrics, NodeCollector, UsageReader, serve
from hami_node.plugin.mig import MigManager, mig_gpus
from hami_node.plugin.overcap import OverCapWatch
from hami_node.plugin.overshare import OverShareWatch
from hami_node.plugin.publisher import NodePublisher
from hami_node.plugin.registration import PluginServer
from hami_node.plugin.sdnotify import Notifier
from hami_node.plugin.service import DevicePluginService


def endpoint_name(resource: str) -> str:
    """Our socket's file name in the plugin directory, e.g. hami-nvidia.com-gpu.sock."""
    return "hami-" + resource.replace("/", "-") + ".sock"


class NodeAgent:
    """hami-node for one node: start(), run(stop_event), stop()."""

    def __init__(self, config: NodeConfig, *, backend: Optional[DeviceBackend] = None,
                 cluster: Optional[ClusterApi] = None, notifier: Optional[Notifier] = None,
                 usage_reader: Optional[UsageReader] = None, dra_api=None, mig_backend=None,
                 log: Callable[[str], None] = print):
        self.config, self.log = config, log
        if backend is None:
            from hami_node.plugin.nvml import NvmlBackend
            backend = NvmlBackend()
        if cluster is None:
            from hami_node.plugin.cluster import connect
            cluster = connect(config.kubeconfig)
        self.backend, self.cluster = backend, cluster
        self.mig_backend = mig_backend
        self.mig: Optional[MigManager] = None
        self.notifier = notifier or Notifier()
        self.usage_reader = usage_reader
        self.metrics = AgentMetrics()
        self.publisher: Optional[NodePublisher] = None
        self.service: Optional[DevicePluginService] = None
        self.dra_api = dra_api            # the DRA driver's API (kubeletPlugin: dra)
        self.socket_path = ""             # where kubelet calls us, once started
        self.metrics_url = ""
        self.layout = HostLayout(Path(config.shim_host_dir))
        self._parts = []
        self._http = None

    def _table(self) -> DeviceTable:
        gpus, unmatched = select_gpus(self.backend.discover(), self.config.exclude_devices)
        for entry in unmatched:
            self.log(f"excludeDevices entry {entry!r} matches no GPU on this node (UUID or "
                     "index expected)")
        if not gpus:
            self.log("no GPU to advertise on this node; serving an empty device list")
        for gpu in gpus:
            self.log(f"GPU {gpu.index}: {gpu.uuid} {gpu.name}, {gpu.memory_mib} MiB, NUMA "
                     f"{gpu.numa}")
        return DeviceTable(gpus, self.config.device_split_count)

    def _limits(self) -> Limits:
        c = self.config
        return Limits(split=c.device_split_count, memory_scaling=c.device_memory_scaling,
                      default_memory=c.default_memory, default_cores=c.default_cores,
                      disable_core_limit=c.disable_core_limit, resource=c.resource_name,
                      cdi_kind=c.cdi_kind)

    def _serve_metrics(self, table: DeviceTable) -> None:
        if not self.config.metrics_address:
            return
        from hami_node.plugin.metrics import no_usage
        self.metrics.registry.register(NodeCollector(
            self.config.node_name, self.backend, table, self.layout,
            self.usage_reader or no_usage, mig=self.mig))
        try:
            self._http, port = serve(self.metrics.registry, self.config.metrics_address)
        except OSError as e:
            raise NodeAgentError(f"metricsAddress {self.config.metrics_address}: cannot listen "
                                 f"({e.strerror}); pick another port or set it empty") from e
        host = self.config.metrics_address.rpartition(":")[0] or "0.0.0.0"
        self.metrics_url = f"http://{host}:{port}/metrics"

    def start(self) -> "NodeAgent":
        """Discovers the GPUs and starts every part; NodeAgentError when it cannot."""
        c = self.config
        try:
            self.layout.containers.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise NodeAgentError(f"shimHostDir {c.shim_host_dir}: cannot create "
                                 f"{self.layout.containers} ({e.strerror})") from e
        self.table = table = self._table()
        self._start_mig(table)
        self._serve_metrics(table)
        self.health = HealthMonitor(self.backend, table, c.ignored_xids,
                                    c.health_recovery_seconds, log=self.log,
                                    on_xid=self.metrics.observe_xid).start()
        self._parts = [("health monitor", self.health)]
        if c.kubelet_plugin == "dra":
            from hami_node.dra.agent import start_dra
            parts, self.socket_path = start_dra(c, table, self.backend, self.cluster,
                                                self.layout, self.dra_api, log=self.log)
            self._parts += parts
        else:
            self._start_device_plugin(table)
        if c.over_cap_check_seconds:
            self._parts.append(("over-cap check", OverCapWatch(
                self.backend, self.cluster, c.node_name, c.over_cap_check_seconds,
                evict=c.evict_over_cap, on_round=self.metrics.observe_over_cap,
                log=self.log).start()))
        if c.over_cap_check_seconds and not c.disable_core_limit:
            # With the limiter disabled no container is held to its gpucores: nothing to check.
            self._parts.append(("over-share check", OverShareWatch(
                self.backend, self.cluster, c.node_name, c.over_cap_check_seconds,
                tolerance=c.over_share_tolerance, default_cores=c.default_cores,
                evict=c.evict_over_share, on_round=self.metrics.observe_over_share,
                log=self.log).start()))
        self.metrics.up.set(1)
        self.notifier.ready(f"serving {len(table.gpus)} GPU(s) as a DRA driver"
                            if c.kubelet_plugin == "dra" else
                            f"serving {len(table.gpus)} GPU(s) x {c.device_split_count}")
        return self

    def _start_device_plugin(self, table: DeviceTable) -> None:
        c = self.config
        self.allocator = Allocator(self.cluster, table, c.node_name, self._limits(), self.layout,
                                   log=self.log, observe=self.metrics.observe_allocate,
                                   mig=self.mig)
        self.service = DevicePluginService(table, self.allocator, log=self.log,
                                           numa=c.numa_topology,
                                           device_specs=c.pass_device_specs)
        self.server = PluginServer(c.device_plugin_dir, endpoint_name(c.resource_name),
                                   c.resource_name, self.service, log=self.log,
                                   on_register=self._registered).start()
        self.socket_path = self.server.socket_path
        self.publisher = NodePublisher(
            self.cluster, table, c.node_name, c.device_memory_scaling, c.device_core_scaling,
            c.annotation_interval, layout=self.layout,
            housekeeping=self._housekeeping, log=self.log,
            on_patch=self.metrics.annotation_patches.inc, mig=self.mig).start()
        self._parts += [("kubelet registration", self.server),
                        ("node annotation publisher", self.publisher)]

    def _start_mig(self, table: DeviceTable) -> None:
        uuids = mig_gpus(table.gpus, self.config.mig_devices)
        if not self.config.mig_devices:
            return
        if not uuids:
            self.log(f"migDevices {list(self.config.mig_devices)} matches no GPU on this node")
        if self.mig_backend is None:
            from hami_node.plugin.mig_nvml import NvmlMig
            self.mig_backend = NvmlMig()
        self.mig = MigManager(self.mig_backend, uuids, log=self.log, pods=lambda: (
            self.cluster.list_node_pods(self.config.node_name)))
        self.mig.prepare()
        self.mig.reconcile(self.cluster.list_node_pods(self.config.node_name))

    def _housekeeping(self) -> None:
        self.allocator.release_stale_lock()
        if self.mig is not None:
            try:
                self.mig.reconcile(self.cluster.list_node_pods(self.config.node_name))
            except ClusterError as e:
                self.log(f"MIG reconcile skipped: cannot list this node's pods ({e})")

    def _registered(self) -> None:
        self.metrics.registrations.inc()
        if self.publisher is not None:        # None at the first registration: it starts next
            self.publisher.poke()

    def dead_parts(self) -> list:
        """Names of the parts whose thread stopped."""
        return [name for name, part in self._parts if not part.alive()]

    def run(self, stop: threading.Event) -> int:
        """Pings the watchdog while every part runs; returns 1 as soon as one died."""
        interval = min(1.0, self.notifier.watchdog_s / 2) if self.notifier.watchdog_s else 1.0
        while not stop.wait(interval):
            dead = self.dead_parts()
            if dead:
                self.log(f"internal failure: {', '.join(dead)} stopped; exiting so that the "
                         "service manager restarts hami-node")
                return 1
            self.notifier.watchdog()
        return 0

    def stop(self) -> None:
        """Stops every part (registration last to first), removing our socket."""
        self.notifier.stopping()
        self.metrics.up.set(0)
        if self.service is not None:
            self.service.stopping.set()
        for _, part in reversed(self._parts):
            part.stop()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
