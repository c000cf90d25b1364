"""Starts the real control plane of a RealCluster: etcd, kube-apiserver, the controller
manager, deploy/'s RBAC, hami-control with its ServiceAccount's token, deploy/'s webhook
configuration, and two kube-schedulers: deploy/'s (profile hami-scheduler, our extender, with
hami-control's ServiceAccount as deploy/ runs it) and the cluster's default one."""
from __future__ import annotations

import json
import ssl
import urllib.request

from hami_sim.realcluster import config as cfg
from hami_sim.realcluster.cluster import free_port, host_ip, wait_for

CONTROL_SA = ("hami-system", "hami-control")
NODE_SA = ("kube-system", "hami-node")
TOKEN_DURATION = "24h"
SERVICE_RANGE = "10.96.0.0/16"


def _get(url: str, context=None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3, context=context) as resp:
            return resp.status == 200
    except OSError:
        return False


def start(c) -> None:
    """Everything of the control plane, in dependency order."""
    c.ports.update(etcd=free_port(), etcd_peer=free_port(), apiserver=free_port(),
                   control=free_port(), scheduler=free_port(), default_scheduler=free_port())
    start_etcd(c)
    start_apiserver(c)
    if not c.scheduling_only:
        start_controller_manager(c)
    if c.installed:        # the chart brings RBAC, hami-control, its scheduler and webhook
        from hami_sim.realcluster.installed import start_service_proxy
        start_service_proxy(c, SERVICE_RANGE)
        start_default_scheduler(c)
        return
    c.apply(cfg.rbac_objects())
    c.step("deploy/'s namespace, ServiceAccounts, ClusterRoles and bindings applied")
    start_control(c)
    c.apply([cfg.webhook_config(c.control.url, c.pki.ca.read_bytes())])
    c.step(f"deploy/'s MutatingWebhookConfiguration applied (URL {c.control.url}/webhook, "
           "caBundle: the generated CA)")
    c.apply(cfg.deploy_docs("hami-control-pod-guard.yaml"))
    c.step("deploy/'s ValidatingAdmissionPolicy on hami-py's pod annotations applied")
    start_schedulers(c)


def start_etcd(c) -> None:
    """etcd on loopback, its data in the work folder."""
    client = f"http://127.0.0.1:{c.ports['etcd']}"
    peer = f"http://127.0.0.1:{c.ports['etcd_peer']}"
    proc = c.spawn("etcd", [c.bins["etcd"], "--name", "hami", "--data-dir", str(c.root / "etcd"),
                            "--listen-client-urls", client, "--advertise-client-urls", client,
                            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                            "--initial-cluster", f"hami={peer}", "--unsafe-no-fsync",
                            "--log-level", "warn"])
    wait_for("etcd", lambda: _get(client + "/health"), 60, c.logs / "etcd.log",
             lambda: proc.poll() is None)
    c.step(f"etcd serving {client}")


def start_apiserver(c) -> None:
    """kube-apiserver: TLS, client certificates, RBAC + Node authorization, ServiceAccount
    tokens signed with our key."""
    p = c.pki
    proc = c.spawn("kube-apiserver", [
        c.bins["kube-apiserver"], f"--etcd-servers=http://127.0.0.1:{c.ports['etcd']}",
        "--bind-address=127.0.0.1", f"--secure-port={c.ports['apiserver']}",
        f"--advertise-address={host_ip()}", "--endpoint-reconciler-type=none",
        f"--tls-cert-file={p.crt('apiserver')}", f"--tls-private-key-file={p.key('apiserver')}",
        f"--client-ca-file={p.ca}", "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--service-account-key-file={p.root / 'sa.pub'}",
        f"--service-account-signing-key-file={p.sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-cluster-ip-range={SERVICE_RANGE}", "--allow-privileged=true",
        f"--kubelet-client-certificate={p.crt('apiserver-kubelet-client')}",
        f"--kubelet-client-key={p.key('apiserver-kubelet-client')}",
        # kubelet is reached at the node's InternalIP (as kubeadm configures it; the default
        # tries the node's hostname first, which nothing resolves here) and its serving
        # certificate is verified against the cluster's CA.
        "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
        f"--kubelet-certificate-authority={p.ca}",
        "--profiling=false", "--v=1", *webhook_routing(c),
        *cfg.gate_args(c.feature_gates)])
    c.write_kubeconfig(c.kubeconfig, client_cert=str(p.crt("admin")),
                       client_key=str(p.key("admin")))
    ctx = ssl.create_default_context(cafile=str(p.ca))
    ctx.load_cert_chain(str(p.crt("admin")), str(p.key("admin")))
    wait_for("kube-apiserver", lambda: _get(c.api_url + "/readyz", ctx), 90,
             c.logs / "kube-apiserver.log", lambda: proc.poll() is None)
    c.step(f"kube-apiserver serving {c.api_url} (admin kubeconfig {c.kubeconfig})")


def webhook_routing(c) -> list:
    """The installed mode: the API server calls the webhook Service's endpoints directly
    (a real option of kube-apiserver), not through svcproxy: a Python proxy passes the end of
    an idle keep-alive connection on late, and a webhook call racing it was reset (seen twice)."""
    return ["--enable-aggregator-routing=true"] if c.installed else []


QUOTA_SYNC_S = 5


def start_controller_manager(c, controllers: str = "", extra_args=()) -> None:
    """kube-controller-manager with per-controller ServiceAccount credentials; waits for the
    default ServiceAccount (pods need it). With `controllers` (e.g. the resourceclaim
    controller alone, for a scheduling benchmark) only those run and nothing is waited for;
    `extra_args`: more flags (a benchmark's --kube-api-qps)."""
    p = c.pki
    kc = c.write_kubeconfig(c.root / "controller-manager.kubeconfig",
                            client_cert=str(p.crt("controller-manager")),
                            client_key=str(p.key("controller-manager")))
    proc = c.spawn("kube-controller-manager", [
        c.bins["kube-controller-manager"], f"--kubeconfig={kc}",
        f"--service-account-private-key-file={p.sa_key}", f"--root-ca-file={p.ca}",
        "--use-service-account-credentials=true", "--leader-elect=false",
        "--bind-address=127.0.0.1", "--secure-port=0",
        f"--cluster-signing-cert-file={p.ca}", f"--cluster-signing-key-file={p.root / 'ca.key'}",
        # The quota controller recounts every quota this often (default 5 min): the quota test
        # checks that hami-control's keys survive a recount it can wait for.
        f"--resource-quota-sync-period={QUOTA_SYNC_S}s", "--v=1",
        *([f"--controllers={controllers}"] if controllers else []),
        *cfg.gate_args(c.feature_gates), *extra_args])
    if controllers:
        c.step(f"kube-controller-manager running {controllers}")
        return
    wait_for("the default ServiceAccount (kube-controller-manager)",
             lambda: c.kubectl("get", "serviceaccount", "default", "-o", "name",
                               check=False).strip() == "serviceaccount/default",
             60, c.logs / "kube-controller-manager.log", lambda: proc.poll() is None)
    c.step("kube-controller-manager running (ServiceAccounts, tokens, garbage collection)")


def token_kubeconfig(c, namespace: str, name: str):
    """A kubeconfig with a token the API server issues for a ServiceAccount (TokenRequest)."""
    token = c.kubectl("create", "token", name, "-n", namespace,
                      f"--duration={TOKEN_DURATION}").strip()
    return c.write_kubeconfig(c.root / f"{name}.kubeconfig", token=token, namespace=namespace)


def start_control(c) -> None:
    """hami-control as a process with deploy/'s ServiceAccount and its Lease namespace."""
    from hami_sim.control_launch import start_control as launch
    from hami_sim.demo.cluster import clean_base_env
    kc = token_kubeconfig(c, *CONTROL_SA)
    p = c.pki
    c.control = launch(kc, process=True,
                       tls=(p.crt("hami-control"), p.key("hami-control"), p.ca),
                       listen=f"127.0.0.1:{c.ports['control']}",
                       extra_args=["--lease-namespace", CONTROL_SA[0], *c.control_args],
                       env={**clean_base_env(), "POD_NAMESPACE": CONTROL_SA[0]},
                       wait_ready=60)
    c.adopt("hami-control", c.control.process)
    c.step(f"hami-control serving {c.control.url} as ServiceAccount "
           f"{CONTROL_SA[0]}/{CONTROL_SA[1]} (token from TokenRequest)")


def start_schedulers(c) -> None:
    """deploy/'s kube-scheduler (our extender, hami-control's ServiceAccount) and the
    cluster's default kube-scheduler (admin credentials)."""
    kc = c.root / "hami-control.kubeconfig"
    sched = cfg.write_json(c.root / "scheduler-config.yaml",
                           {**cfg.scheduler_config(c.control.url, c.pki.ca, kc),
                            **c.scheduler_settings})
    hami = c.spawn("kube-scheduler", [
        c.bins["kube-scheduler"], f"--config={sched}", "--bind-address=127.0.0.1",
        f"--secure-port={c.ports['scheduler']}", f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}", "--v=2", *cfg.gate_args(c.feature_gates)])
    start_default_scheduler(c)
    wait_for("kube-scheduler (hami-scheduler profile) leading",
             lambda: "lease.coordination.k8s.io/hami-scheduler" in c.kubectl(
                 "get", "lease", "-n", CONTROL_SA[0], "-o", "name", check=False).split(),
             60, c.logs / "kube-scheduler.log", lambda: hami.poll() is None)
    c.step("kube-scheduler running deploy/'s KubeSchedulerConfiguration (extender: "
           f"{c.control.url}, TLS server name as shipped), leader of its Lease; the default "
           "kube-scheduler beside it")


def start_default_scheduler(c) -> None:
    """The cluster's default kube-scheduler (admin credentials)."""
    default = cfg.write_json(c.root / "default-scheduler-config.yaml", {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": str(c.kubeconfig)}, **c.scheduler_settings})
    c.spawn("default-scheduler", [
        c.bins["kube-scheduler"], f"--config={default}", "--bind-address=127.0.0.1",
        f"--secure-port={c.ports['default_scheduler']}",
        f"--authentication-kubeconfig={c.kubeconfig}",
        f"--authorization-kubeconfig={c.kubeconfig}", "--v=1",
        *cfg.gate_args(c.feature_gates)])


def json_items(text: str) -> list:
    """The items of a `kubectl get -o json` answer."""
    return json.loads(text).get("items", [])
