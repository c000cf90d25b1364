"""ControlPlane: wires the pieces of hami-control together (state, sync, leader election,
handlers, metrics, HTTP server) from a ControlConfig and the injected boundaries."""
import logging
from datetime import timedelta
from typing import Optional

from hami_control.claims.gate import QuotaGate
from hami_control.claims.nodes import DraNodes
from hami_control.claims.published import PublishedGpus
from hami_control.clock import Clock, SystemClock
from hami_control.cluster.ca_bundle import WebhookCaBundle
from hami_control.cluster.dra_templates import DraTemplates
from hami_control.cluster.leader import AlwaysLeader, LeaderElector
from hami_control.cluster.leader_label import LeaderLabel
from hami_control.cluster.status_writer import StatusWriter
from hami_control.cluster.stranded import StrandedPods
from hami_control.cluster.sync import ClusterSync, PodScope
from hami_control.config import ControlConfig
from hami_control.dashboard import Dashboard
from hami_control.errors import ConfigError
from hami_control.extender.bind import BindHandler
from hami_control.extender.filter import FilterHandler
from hami_control.extender.lock import NodeLocker
from hami_control.extender.preempt import PreemptHandler
from hami_control.extender.prioritize import PrioritizeHandler
from hami_control.extender.writes import DecisionWriter
from hami_control.kueue.controller import KueueCheck
from hami_control.metrics import ControlMetrics
from hami_control.placement import PlacementError
from hami_control.placement.registry import SERVER_POLICIES
from hami_control.preemption.evict import Evictor
from hami_control.preemption.trigger import FilterPreemption
from hami_control.server.app import Endpoints, make_app
from hami_control.server.wsgi import HttpServer
from hami_control.state import make_state
from hami_control.webhook.admission import Webhook
from hami_control.webhook.namespaces import NamespaceLabels

log = logging.getLogger(__name__)


def _state(config: ControlConfig):
    for flag, name in (("--node-scheduler-policy", config.node_policy),
                       ("--gpu-scheduler-policy", config.gpu_policy)):
        if name not in SERVER_POLICIES:
            raise ConfigError(flag, f"unknown policy {name!r}; use one of "
                                    f"{', '.join(SERVER_POLICIES)}")
    try:
        return make_state(config.node_policy, config.gpu_policy, config.track_resources,
                          config.preemption_linger_s)
    except PlacementError as e:
        raise ConfigError("--node-scheduler-policy/--gpu-scheduler-policy", str(e)) from e


class ControlPlane:
    """One hami-control replica. `api` implements the cluster Protocols (cluster/api.py)."""

    def __init__(self, config: ControlConfig, api, clock: Clock = SystemClock(),
                 metrics: Optional[ControlMetrics] = None):
        self.config, self.api, self.clock = config, api, clock
        self.state = _state(config)
        lease = config.lease
        self.leader_label = LeaderLabel(api, lease.namespace, lease.pod) \
            if lease.enabled and lease.pod else None
        self.leader = LeaderElector(api, lease, clock, on_change=self.leader_label) \
            if lease.enabled else AlwaysLeader()
        self.stranded = StrandedPods(api, config.scheduler_name,
                                     lambda: self.leader.is_leader, clock)
        self.dashboard = Dashboard(config.dashboard, self.state, config.defaults) \
            if config.dashboard else None
        self.published = PublishedGpus(api, clock)
        self.dra_templates = DraTemplates(api, clock, sizes=self.published.sizes)
        self.dra_nodes = DraNodes(clock)
        self.quota_gate = QuotaGate(self.state, api, self.published,
                                    lambda: self.leader.is_leader, clock,
                                    synced=lambda: self.sync.synced)
        self.sync = ClusterSync(api, self.state, clock, config.resync_s,
                                config.handshake_interval_s, writer=api,
                                is_leader=lambda: self.leader.is_leader,
                                pods=PodScope(config.scheduler_name, config.track_resources,
                                              config.all_pods),
                                quotas=config.quotas, budgets=config.preemption != "off",
                                on_pod=self._on_pod, claims=True,
                                whole_mib=self.published.whole_mib, dra_nodes=self.dra_nodes)
        self.status_writer = StatusWriter(self.state, api, config.status_period_s,
                                          is_leader=lambda: self.leader.is_leader,
                                          quotas=config.quotas, node_info=self.sync.node_info)
        self.metrics = metrics or ControlMetrics()
        self.metrics.watch(self.state, self._status)
        # Half the HTTP workers at most wait on node locks: filters need the others.
        locker = NodeLocker(api, clock, timedelta(seconds=config.lock_expiry_s),
                            cached=self._cached_lock, wait_s=config.lock_wait_s,
                            max_waiters=config.threads // 2,
                            changed=self.sync.wait_node_change)
        self.writer = DecisionWriter()
        self._extender(config, api, clock, locker)
        self.webhook = Webhook(config.scheduler_name, config.defaults,
                               NamespaceLabels(api, clock), config.runtime_class,
                               self.state.namespace_limits if config.quotas else
                               (lambda namespace: {}))
        self.app = make_app(Endpoints(self.webhook, self._filter(), self.bind, self.healthz,
                                      self.readyz, self.metrics.render, self.metrics.observe,
                                      self.metrics.result,
                                      leading=lambda: self.leader.is_leader,
                                      preempt=self.preempt, prioritize=self.prioritize),
                              config.max_body)
        self.kueue = KueueCheck(self.state, api, config.defaults, lambda: self.leader.is_leader,
                                config.kueue_check, config.kueue_period_s) \
            if config.kueue_check else None
        self.server: Optional[HttpServer] = None
        self.ca_bundle = WebhookCaBundle(api, config.webhook_configuration,
                                         config.webhook_ca_file, config.webhook_ca_check_s) \
            if config.webhook_configuration else None

    def _extender(self, config: ControlConfig, api, clock, locker) -> None:
        """The filter (with preemption in `auto` mode), preempt and bind handlers."""
        self.evictor = Evictor(api, clock, config.scheduler_name) \
            if config.preemption == "auto" else None
        self.filter = FilterHandler(
            self.state, api, self.leader, clock, config.defaults, self.metrics,
            synced=lambda: self.sync.synced, writer=self.writer, scheduler=config.scheduler_name,
            preemption=FilterPreemption(self.state, self.evictor) if self.evictor else None)
        self.preempt = PreemptHandler(self.state, self.leader, config.defaults, self.metrics,
                                      synced=lambda: self.sync.synced,
                                      enabled=config.preemption != "off")
        self.prioritize = PrioritizeHandler(self.dra_nodes, lambda: self.sync.synced,
                                            self.metrics)
        self.bind = BindHandler(self.state, api, self.leader, locker, clock,
                                config.scheduler_name, config.defaults, self.metrics,
                                synced=lambda: self.sync.synced, writer=self.writer,
                                asked_no_gpu=self.filter.asked_no_gpu)

    def _on_pod(self, pod: dict, deleted: bool) -> None:
        self.stranded.on_pod(pod, deleted)
        self.dra_templates.on_pod(pod, deleted)
        self.quota_gate.on_pod(pod, deleted)
        if self.dashboard:
            self.dashboard.record.on_pod(pod, deleted)

    def _filter(self):
        return self.dashboard.wrap_filter(self.filter) if self.dashboard else self.filter

    def _cached_lock(self, node: str):
        info = self.sync.node_info(node)
        return None if info is None else (info.resource_version, info.lock)

    def _status(self) -> dict:
        return {"hami_control_leader": ("1 while this replica leads", int(self.leader.is_leader)),
                "hami_control_synced": ("1 once nodes and pods are listed", int(self.sync.synced))}

    def start(self) -> "ControlPlane":
        """Starts the sync, the election and the HTTP server (ConfigError if it cannot bind)."""
        cfg = self.config
        self.server = HttpServer(self.app, cfg.host, cfg.port, cfg.threads, cfg.tls_cert,
                                 cfg.tls_key).start()
        if self.dashboard:
            self.dashboard.start()
        self.dra_templates.start()
        self.quota_gate.start()
        self.sync.start()
        if self.leader_label:       # a restarted container's pod may still carry the label
            self.leader_label(False)
        self.leader.start()
        self.status_writer.start()
        if self.kueue:
            self.kueue.start()
        if self.ca_bundle:
            self.ca_bundle.start()
        return self

    def stop(self) -> None:
        """Stops serving, gives the Lease up, stops the sync."""
        if self.server is not None:
            self.server.stop()
        if self.dashboard:
            self.dashboard.stop()
        self.writer.close()
        if self.evictor:
            self.evictor.close()
        self.status_writer.stop()
        if self.kueue:
            self.kueue.stop()
        if self.ca_bundle:
            self.ca_bundle.stop()
        self.leader.stop()
        if self.leader_label and self.leader_label.labelled is not False:
            self.leader_label(False)
        self.sync.stop()
        self.dra_templates.stop()
        self.quota_gate.stop()

    @property
    def url(self) -> str:
        """Where it serves."""
        return self.server.url if self.server else ""

    def healthz(self) -> tuple:
        """Alive unless a sync thread died."""
        if not self.sync.healthy:
            return False, "a cluster sync thread stopped (see the log); restart hami-control"
        return True, "ok"

    def readyz(self) -> tuple:
        """Ready once the view is synced: a follower can serve the webhook, and a rolling
        update needs its new pod Ready while the old one still leads. Only the leader filters
        and binds; the extender's Service finds it by its label (cluster/leader_label.py)."""
        if not self.sync.synced:
            return False, ("the cluster view is not synced yet (listing nodes, pods and "
                           "resourcequotas)")
        if self.leader.is_leader:
            return True, "ready (the leader: filters and binds)"
        return True, (f"ready (a follower: serves the webhook; the lease is held by "
                      f"{getattr(self.leader, 'holder', '') or 'nobody yet'})")
