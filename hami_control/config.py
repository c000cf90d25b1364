"""hami-control's settings: the command-line flags, checked into one ControlConfig.

Every check names the flag to fix (ConfigError.key), so a broken deployment says what is wrong
in its first log line and exits non-zero.
"""
import argparse
import os
import re
import socket
from dataclasses import dataclass, field
from typing import Optional

from hami_common.constants import SCHEDULER_NAME
from hami_common.errors import RequestError
from hami_common.request import RequestDefaults
from hami_control.errors import ConfigError

DEFAULT_LISTEN = "127.0.0.1:9443"
PREEMPTION_MODES = ("auto", "verb", "off")
MAX_BODY = 1 << 20


@dataclass(frozen=True)
class LeaseConfig:
    """Leader election on a coordination.k8s.io/v1 Lease (client-go's timing defaults)."""

    enabled: bool = True
    name: str = "hami-control"
    namespace: str = "kube-system"
    identity: str = ""
    duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    # The pod labelled LEADER_LABEL while this replica leads (the extender's Service selects on
    # it); empty outside a pod. It lives in the Lease's namespace.
    pod: str = ""


@dataclass(frozen=True)
class DashboardConfig:
    """The read-only dashboard's own listener (hami_control/dashboard)."""

    host: str = "127.0.0.1"
    port: int = 9445
    node_metrics: str = ""          # URL template or @FILE (dashboard/scrape.py); "" = none
    scrape_period_s: float = 5.0


@dataclass(frozen=True)
class ControlConfig:
    """Everything hami-control needs to start."""

    host: str = "127.0.0.1"
    port: int = 9443
    kubeconfig: Optional[str] = None
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    scheduler_name: str = SCHEDULER_NAME
    node_policy: str = "fragaware"
    gpu_policy: str = "fragaware"
    defaults: RequestDefaults = field(default_factory=RequestDefaults)
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    resync_s: float = 300.0
    all_pods: bool = False
    track_resources: bool = True
    quotas: bool = True
    preemption: str = "auto"            # auto | verb | off (docs/preemption.md)
    preemption_linger_s: float = 30.0
    kueue_check: str = "hami.io/gpu-fit"    # Kueue admission check controllerName; "" = off
    kueue_period_s: float = 2.0
    status_period_s: float = 5.0
    handshake_interval_s: float = 30.0
    lock_expiry_s: float = 300.0
    lock_wait_s: float = 5.0
    max_body: int = MAX_BODY
    threads: int = 16
    runtime_class: str = ""             # set on GPU pods that name none; "" = leave it
    webhook_configuration: str = ""     # keep its caBundle (with webhook_ca_file); "" = off
    webhook_ca_file: str = ""
    webhook_ca_check_s: float = 60.0
    log_level: str = "info"
    dashboard: Optional["DashboardConfig"] = None   # None: no dashboard listener

    @property
    def tls(self) -> bool:
        """Whether the server speaks HTTPS."""
        return bool(self.tls_cert)


def parser() -> argparse.ArgumentParser:
    """The command line of hami-control."""
    p = argparse.ArgumentParser(
        prog="hami-control",
        description="HAMi-compatible mutating webhook and kube-scheduler extender "
                    "(POST /webhook, /filter, /bind; GET /healthz, /readyz, /metrics)")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"address to serve on (default {DEFAULT_LISTEN})")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster service "
                   "account, else $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--tls-cert", help="PEM certificate (chain) to serve HTTPS with")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument("--scheduler-name", default=SCHEDULER_NAME,
                   help=f"schedulerName the webhook gives GPU pods (default {SCHEDULER_NAME})")
    p.add_argument("--node-scheduler-policy", default="fragaware",
                   help="default node policy: binpack, spread or fragaware (default)")
    p.add_argument("--gpu-scheduler-policy", default="fragaware",
                   help="default GPU policy: binpack, spread or fragaware (default)")
    p.add_argument("--default-mem", type=int, default=0, metavar="MIB",
                   help="GPU memory of a container that gives none (0: the whole GPU)")
    p.add_argument("--default-cores", type=int, default=0, metavar="PERCENT",
                   help="GPU cores of a container that gives none (default 0)")
    p.add_argument("--default-gpu-num", type=int, default=1, metavar="N",
                   help="GPUs of a container that sets memory or cores without a count")
    _lease_flags(p)
    _dashboard_flags(p)
    p.add_argument("--all-pods", action="store_true",
                   help="count the GPU annotations of every pod, not only of pods whose "
                        "schedulerName is --scheduler-name (when another scheduler name also "
                        "places HAMi GPU pods in this cluster)")
    p.add_argument("--track-cpu-memory", action=argparse.BooleanOptionalAction, default=True,
                   help="keep nodes' allocatable CPU and memory and every bound pod's requests "
                        "in the view, so that placement avoids GPUs that CPU or memory would "
                        "strand (watches every unfinished pod; default on). "
                        "--no-track-cpu-memory watches only the pods of --scheduler-name and "
                        "places on GPUs alone")
    p.add_argument("--quotas", action=argparse.BooleanOptionalAction, default=True,
                   help="enforce namespace GPU quotas from ResourceQuota objects "
                        "(limits.nvidia.com/gpu, gpumem, gpucores; watches resourcequotas; "
                        "default on)")
    p.add_argument("--preemption", choices=PREEMPTION_MODES, default="auto",
                   help="GPU-aware preemption: auto (the filter preempts for a pod that fits "
                        "nowhere, and the preempt verb answers kube-scheduler), verb (only "
                        "answer kube-scheduler's preempt verb), off (neither; default auto)")
    p.add_argument("--preemption-linger", type=float, default=30.0, metavar="SECONDS",
                   help="how long slices freed by preemption stay held for their pod after "
                        "its last victim went, if it is not placed (default 30)")
    p.add_argument("--kueue-admission-check", default="hami.io/gpu-fit", metavar="CONTROLLER",
                   help="act as the Kueue admission check controller of that controllerName: "
                        "a workload is admitted once a GPU fits each of its pods (empty: off; "
                        "default hami.io/gpu-fit)")
    p.add_argument("--kueue-check-period", type=float, default=2.0, metavar="SECONDS",
                   help="how often the leader looks at workloads waiting on the check "
                        "(default 2)")
    p.add_argument("--status-period", type=float, default=5.0, metavar="SECONDS",
                   help="on the leader, write each quota's GPU use into its status and each "
                        "node's allocation summary (annotation hami.io/node-gpu-allocated) "
                        "this often, only where they changed; 0 to never (default 5)")
    p.add_argument("--resync-period", type=float, default=300.0, metavar="SECONDS",
                   help="full relist of nodes and pods this often (default 300)")
    p.add_argument("--handshake-interval", type=float, default=30.0, metavar="SECONDS",
                   help="write hami.io/node-handshake this often, 0 to never (default 30)")
    p.add_argument("--lock-expiry", type=float, default=300.0, metavar="SECONDS",
                   help="a node lock older than this is taken over (default 300)")
    p.add_argument("--lock-wait", type=float, default=5.0, metavar="SECONDS",
                   help="a bind that finds its node locked by another pod waits this long "
                        "for the node agent to release it before refusing (a refusal sends "
                        "the pod into kube-scheduler's backoff); 0 refuses at once "
                        "(default 5)")
    p.add_argument("--max-body", type=int, default=MAX_BODY, metavar="BYTES",
                   help=f"largest request body accepted (default {MAX_BODY})")
    p.add_argument("--threads", type=int, default=16, help="HTTP worker threads (default 16)")
    p.add_argument("--runtime-class", default="", metavar="NAME",
                   help="runtimeClassName the webhook sets on GPU pods that name none (e.g. "
                        "nvidia, where the GPU Operator runs in CDI mode and containers rely on "
                        "NVIDIA_VISIBLE_DEVICES); default: leave pods as they are")
    p.add_argument("--webhook-configuration", default="", metavar="NAME",
                   help="MutatingWebhookConfiguration whose caBundle hami-control keeps equal "
                        "to --webhook-ca-file (deploy/ leaves it out of the manifest)")
    p.add_argument("--webhook-ca-file", default="", metavar="PATH",
                   help="the CA certificate (PEM) that signed --tls-cert")
    p.add_argument("--webhook-ca-check", type=float, default=60.0, metavar="SECONDS",
                   help="how often the caBundle is checked (default 60)")
    p.add_argument("--log-level", default="info",
                   choices=("debug", "info", "warning", "error"))
    return p


def _lease_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("leader election (only the leader filters and binds)")
    g.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True,
                   help="take part in leader election (default on)")
    g.add_argument("--lease-name", default="hami-control")
    g.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE") or "kube-system",
                   help="namespace of the Lease (default $POD_NAMESPACE, else kube-system)")
    g.add_argument("--identity", default="",
                   help="this replica's name in the Lease (default $POD_NAME or hostname_pid)")
    g.add_argument("--lease-duration", type=float, default=15.0, metavar="SECONDS")
    g.add_argument("--renew-deadline", type=float, default=10.0, metavar="SECONDS")
    g.add_argument("--retry-period", type=float, default=2.0, metavar="SECONDS")
    g.add_argument("--leader-pod", default=os.environ.get("POD_NAME", ""), metavar="NAME",
                   help="the pod (in the Lease's namespace) to label hami.io/control-leader=true "
                        "while this replica leads, so that the extender's Service reaches only "
                        "the leader (default $POD_NAME; empty: no label)")


def _dashboard_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("dashboard (a read-only web page on its own listener)")
    g.add_argument("--dashboard-listen", default="", metavar="HOST:PORT",
                   help="serve the dashboard (plain HTTP, read-only) there; default: off")
    g.add_argument("--dashboard-node-metrics", default="", metavar="TEMPLATE|@FILE",
                   help="where the node agents' /metrics are, for measured use: a URL with "
                        "{node} and/or {agent_ip} (the hami-node pod's IP on that node), e.g. "
                        "http://{agent_ip}:9394/metrics, or @FILE, a JSON object node -> URL; "
                        "default: no measured use")
    g.add_argument("--dashboard-scrape-period", type=float, default=5.0, metavar="SECONDS",
                   help="how often the node agents are scraped (default 5)")


def _dashboard(args) -> Optional[DashboardConfig]:
    if not args.dashboard_listen:
        if args.dashboard_node_metrics:
            raise ConfigError("--dashboard-node-metrics", "needs --dashboard-listen")
        return None
    host, port = _listen(args.dashboard_listen, "--dashboard-listen")
    metrics = args.dashboard_node_metrics
    if metrics.startswith("@") and not os.path.isfile(metrics[1:]):
        raise ConfigError("--dashboard-node-metrics", f"file {metrics[1:]!r} does not exist")
    if metrics and not metrics.startswith(("@", "http://", "https://")):
        raise ConfigError("--dashboard-node-metrics", f"{metrics!r} is neither an http(s) URL "
                          "template nor @FILE")
    return DashboardConfig(host, port, metrics,
                           _positive("--dashboard-scrape-period", args.dashboard_scrape_period))


def _listen(value: str, flag: str = "--listen") -> tuple:
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ConfigError(flag, f"{value!r} must be HOST:PORT, e.g. 0.0.0.0:9443")
    try:
        number = int(port)
    except ValueError as e:
        raise ConfigError(flag, f"port {port!r} is not a number") from e
    if not 0 <= number <= 65535:
        raise ConfigError(flag, f"port {number} is outside 0..65535")
    return host.strip("[]"), number


def _positive(key: str, value: float, zero_ok: bool = False) -> float:
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(key, f"must be {'>= 0' if zero_ok else '> 0'}, got {value}")
    return value


def _lease(args) -> LeaseConfig:
    duration = _positive("--lease-duration", args.lease_duration)
    renew = _positive("--renew-deadline", args.renew_deadline)
    retry = _positive("--retry-period", args.retry_period)
    if renew >= duration:
        raise ConfigError("--renew-deadline", f"({renew}) must be shorter than "
                          f"--lease-duration ({duration})")
    if retry >= renew:
        raise ConfigError("--retry-period", f"({retry}) must be shorter than "
                          f"--renew-deadline ({renew})")
    identity = args.identity or os.environ.get("POD_NAME") or \
        f"{socket.gethostname()}_{os.getpid()}"
    if not args.lease_name or not args.lease_namespace:
        raise ConfigError("--lease-name" if not args.lease_name else "--lease-namespace",
                          "must not be empty")
    return LeaseConfig(args.leader_elect, args.lease_name, args.lease_namespace, identity,
                       duration, renew, retry, args.leader_pod)


def _dns_label(key: str, value: str) -> str:
    """A DNS subdomain name (what a RuntimeClass is called), or empty."""
    if value and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", value):
        raise ConfigError(key, f"{value!r} is not a valid RuntimeClass name (lower-case "
                               "letters, digits, '-' and '.')")
    return value


def _tls(args) -> tuple:
    if bool(args.tls_cert) != bool(args.tls_key):
        missing = "--tls-key" if args.tls_cert else "--tls-cert"
        raise ConfigError(missing, "--tls-cert and --tls-key go together; give both or neither")
    for key, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if path and not os.path.isfile(path):
            raise ConfigError(key, f"file {path!r} does not exist")
    return args.tls_cert, args.tls_key


def _defaults(args) -> RequestDefaults:
    for key, value, low, high in (("--default-mem", args.default_mem, 0, None),
                                  ("--default-cores", args.default_cores, 0, 100),
                                  ("--default-gpu-num", args.default_gpu_num, 0, None)):
        if value < low or (high is not None and value > high):
            raise ConfigError(key, f"{value} is out of range ({low}.."
                                   f"{high if high is not None else ''})")
    try:
        return RequestDefaults(args.default_mem, args.default_cores, args.default_gpu_num)
    except RequestError as e:
        raise ConfigError("--default-mem", str(e)) from e


def from_args(argv) -> ControlConfig:
    """The configuration for a command line; ConfigError names the flag that is wrong.

    argparse itself exits (status 2, naming the flag) for an unknown flag or a non-number."""
    args = parser().parse_args(argv)
    host, port = _listen(args.listen)
    cert, key = _tls(args)
    if args.kubeconfig and not os.path.isfile(args.kubeconfig):
        raise ConfigError("--kubeconfig", f"file {args.kubeconfig!r} does not exist")
    defaults = _defaults(args)
    if not args.scheduler_name:
        raise ConfigError("--scheduler-name", "must not be empty")
    if args.threads < 1:
        raise ConfigError("--threads", f"must be at least 1, got {args.threads}")
    if args.max_body < 1024:
        raise ConfigError("--max-body", f"must be at least 1024 bytes, got {args.max_body}")
    if bool(args.webhook_configuration) != bool(args.webhook_ca_file):
        raise ConfigError("--webhook-ca-file" if args.webhook_configuration
                          else "--webhook-configuration",
                          "--webhook-configuration and --webhook-ca-file go together")
    if args.webhook_ca_file and not os.path.isfile(args.webhook_ca_file):
        raise ConfigError("--webhook-ca-file", f"file {args.webhook_ca_file!r} does not exist")
    return ControlConfig(
        host=host, port=port, kubeconfig=args.kubeconfig, tls_cert=cert, tls_key=key,
        scheduler_name=args.scheduler_name, node_policy=args.node_scheduler_policy,
        gpu_policy=args.gpu_scheduler_policy, defaults=defaults, lease=_lease(args),
        resync_s=_positive("--resync-period", args.resync_period), all_pods=args.all_pods,
        track_resources=args.track_cpu_memory, quotas=args.quotas,
        preemption=args.preemption,
        preemption_linger_s=_positive("--preemption-linger", args.preemption_linger),
        kueue_check=args.kueue_admission_check,
        kueue_period_s=_positive("--kueue-check-period", args.kueue_check_period),
        status_period_s=_positive("--status-period", args.status_period, True),
        handshake_interval_s=_positive("--handshake-interval", args.handshake_interval, True),
        lock_expiry_s=_positive("--lock-expiry", args.lock_expiry),
        lock_wait_s=_positive("--lock-wait", args.lock_wait, True), max_body=args.max_body,
        threads=args.threads, log_level=args.log_level,
        runtime_class=_dns_label("--runtime-class", args.runtime_class),
        webhook_configuration=args.webhook_configuration, webhook_ca_file=args.webhook_ca_file,
        webhook_ca_check_s=_positive("--webhook-ca-check", args.webhook_ca_check),
        dashboard=_dashboard(args))
