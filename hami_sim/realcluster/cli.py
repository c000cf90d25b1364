"""`hami-sim cluster up --real`: the real one-machine cluster (see hami_sim.realcluster),
kept running in the foreground until Ctrl-C, then everything stopped. The first run builds
the Kubernetes components from their Go modules (tools/k8s/build.sh: about 25 minutes on two
cores), later runs take them from the cache."""
from __future__ import annotations

import shutil
from pathlib import Path

from hami_sim.demo.cli import EXIT_BROKEN, signals_deferred
from hami_sim.demo.cluster_cli import watch_until_broken


def hints(cluster, kubeconfig: Path) -> str:
    """How to use the cluster."""
    kubectl = cluster.bins["kubectl"]
    agent_log = f"{cluster.pod_logs}/hami-system_hami-node-*/hami-node/" if cluster.installed \
        else cluster.node.agent_log
    return f"""
kubeconfig (admin): {kubeconfig}
kubectl: {kubectl}

  {kubectl} --kubeconfig {kubeconfig} get nodes -o wide
  {kubectl} --kubeconfig {kubeconfig} apply -f examples/01-gpumem-oom.yaml
  {kubectl} --kubeconfig {kubeconfig} get pods -o wide
  {kubectl} --kubeconfig {kubeconfig} describe pod gpumem-oom     # events, annotations
  {kubectl} --kubeconfig {kubeconfig} logs gpumem-oom

Component logs: {cluster.logs}/   hami-node: {agent_log}
Container output: {cluster.pod_logs}/<namespace>_<pod>_<uid>/<container>/0.log
Ctrl-C stops everything (containers included).
"""


def serve_real(args, examples, reporter) -> int:
    """Starts the real cluster, optionally creates the examples, watches until a piece dies
    (or Ctrl-C/SIGTERM, raised as KeyboardInterrupt after everything is stopped)."""
    from hami_sim.realcluster.cluster import ClusterError, RealCluster
    from hami_sim.dashboard_launch import dashboard_args, dashboard_url, write_node_metrics
    cluster = RealCluster(workdir=args.workdir, step=reporter.step, keep=bool(args.workdir),
                          install=args.install)
    if not cluster.installed:  # the chart's dashboard is off by default, as in deploy/
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
