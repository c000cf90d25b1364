"""`hami-sim cluster up --real`: the real one-machine cluster (see hami_sim.realcluster),
kept running in the foreground until Ctrl-C, then everything stopped. The first run builds
the Kubernetes components from their Go modules (tools/k8s/build.sh: about 25 minutes on two
cores), later runs take them from the cache."""
from __future__ import annotations

import shutil
from pathlib import Path

from hami_sim.demo.cli import EXIT_BROKEN, signals_deferred
from hami_sim.demo.cluster_cli import watch_until_broken


def hint_commands(cluster, kubeconfig: Path) -> list:
    """The commands the hints suggest, each runnable as printed from the checkout's folder
    (tests/k8s runs every one of them): a GPU pod's output, a look inside a running GPU
    container, and in the installed mode the agents' logs and the dashboard."""
    k = f"{cluster.bins['kubectl']} --kubeconfig {kubeconfig}"
    commands = [
        f"{k} get nodes -o wide",
        f"{k} apply -f examples/01-gpumem-oom.yaml",
        f"{k} wait --for=jsonpath='{{.status.phase}}'=Succeeded pod/gpumem-oom --timeout=120s",
        f"{k} get pods -o wide",
        f"{k} describe pod gpumem-oom     # events, annotations",
        f"{k} logs gpumem-oom",
        f"{k} apply -f examples/interactive/gpu-hold.yaml",
        f"{k} wait --for=condition=Ready pod/gpu-hold --timeout=120s",
        f"{k} exec gpu-hold -- hami-smi     # its memory cap and use, its compute limit",
    ]
    if cluster.installed:
        from hami_sim.realcluster.installed import DASHBOARD_PORT, NAMESPACE
        commands += [
            f"{k} -n {NAMESPACE} logs ds/hami-node",
            f"{k} -n {NAMESPACE} logs deploy/hami-control -c hami-control",
            f"{k} -n {NAMESPACE} port-forward deploy/hami-control {DASHBOARD_PORT}"
            f"     # dashboard: http://127.0.0.1:{DASHBOARD_PORT}/ until Ctrl-C"]
    return commands + [f"{k} delete pod gpumem-oom gpu-hold"]


def hints(cluster, kubeconfig: Path) -> str:
    """How to use the cluster."""
    agent = "" if cluster.installed else f" (hami-node: {cluster.node.agent_log})"
    commands = "\n".join(f"  {c}" for c in hint_commands(cluster, kubeconfig))
    return f"""
kubeconfig (admin): {kubeconfig}
kubectl: {cluster.bins['kubectl']}

{commands}

Component logs: {cluster.logs}/{agent}
Ctrl-C stops everything (containers included).
"""


def serve_real(args, examples, reporter) -> int:
    """Starts the real cluster, optionally creates the examples, watches until a piece dies
    (or Ctrl-C/SIGTERM, raised as KeyboardInterrupt after everything is stopped)."""
    from hami_sim.realcluster.cluster import ClusterError, RealCluster
    from hami_sim.dashboard_launch import dashboard_args, dashboard_url, write_node_metrics
    cluster = RealCluster(workdir=args.workdir, step=reporter.step, keep=bool(args.workdir),
                          install=args.install)
    if not cluster.installed:  # installed: the chart's dashboard (installed.values), forwarded
        cluster.control_args += dashboard_args(cluster.root)      # the dashboard is on here
    try:
        how = "helm install of charts/hami-py" if cluster.installed else "hami-control, hami-node"
        with reporter.waiting("building (first time) and starting etcd, kube-apiserver, "
                              f"kube-controller-manager, kube-scheduler, containerd, kubelet, "
                              f"{how}"):
            cluster.start()
        kubeconfig = cluster.kubeconfig
        if args.kubeconfig_out:
            shutil.copyfile(kubeconfig, args.kubeconfig_out)
            kubeconfig = Path(args.kubeconfig_out).resolve()
        reporter.line(hints(cluster, kubeconfig))
        if not cluster.installed:
            write_node_metrics(cluster.root, {cluster.spec.name: cluster.node.metrics_url})
            reporter.line(f"Dashboard (read-only): {dashboard_url(cluster.control)}\n")
        for ex in examples:
            cluster.core_v1.create_namespaced_pod(ex.namespace, ex.pod)
            reporter.step(f"{ex.namespace}/{ex.name} created: {ex.shows}")
        return watch_until_broken(cluster, reporter, "hami-sim cluster up --real",
                                  cluster.logs)
    except ClusterError as e:
        reporter.line(f"hami-sim cluster up --real: {e}")
        return EXIT_BROKEN
    finally:
        with signals_deferred():
            cluster.stop()
