"""`hami-sim cluster up`: the demo's simulated cluster, kept running in the foreground for you to
poke with kubectl or the kubernetes Python client, until Ctrl-C.

Besides the API server double (which calls hami-control's mutating webhook when you create a
pod, as a real API server does), hami-control and the two GPU nodes, it runs what a real
cluster's control plane would do around them: the kube-scheduler double (filter + bind through
the extender) and, on each node, the container runtime that runs a bound pod's command as a
local process against that node's simulated GPUs.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import List, Optional

from hami_sim.demo.cli import EXIT_BROKEN, EXIT_OK, EXIT_USAGE, run_command, signals_deferred

POD_COLUMNS = "NAME:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName"
USAGE = ("usage: hami-sim cluster up [--real [--install helm]] [--workdir DIR] "
         "[--kubeconfig-out FILE] [--with-examples]")


def parser() -> argparse.ArgumentParser:
    """`cluster up`'s command line."""
    p = argparse.ArgumentParser(prog="hami-sim cluster up", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", metavar="DIR",
                   help="where logs, certificates and container output go (kept); default: a "
                        "temporary folder removed at exit")
    p.add_argument("--kubeconfig-out", metavar="FILE",
                   help="also copy the kubeconfig there (e.g. ./kubeconfig)")
    p.add_argument("--real", action="store_true",
                   help="a real Kubernetes cluster (etcd, kube-apiserver, kube-scheduler, "
                        "kubelet, containerd) instead of the doubles; the first run builds it "
                        "(tools/k8s/build.sh, about 25 min on 2 cores); needs root")
    p.add_argument("--install", choices=("processes", "helm"), default="processes",
                   help="with --real: how hami-control and hami-node run: processes with their "
                        "ServiceAccounts' tokens (default), or the chart's Deployment and "
                        "DaemonSet installed with helm from the project's local image")
    p.add_argument("--with-examples", action="store_true",
                   help="submit the example pods of examples/ once the cluster is up")
    p.add_argument("--examples", metavar="DIR", help="folder of example pods (--with-examples)")
    return p


def hints(kubeconfig: Path, root: Path) -> str:
    """How to poke the cluster: kubectl and the Python client."""
    return f"""
kubeconfig: {kubeconfig}

  kubectl --kubeconfig {kubeconfig} get nodes
  kubectl --kubeconfig {kubeconfig} apply --validate=false -f examples/01-gpumem-oom.yaml
  kubectl --kubeconfig {kubeconfig} get pods -o custom-columns={POD_COLUMNS}
  kubectl --kubeconfig {kubeconfig} describe pod gpumem-oom     # annotations, events
  kubectl --kubeconfig {kubeconfig} get events

  python3 - <<'EOF'
  from kubernetes import client, config
  v1 = client.CoreV1Api(config.new_client_from_config("{kubeconfig}"))
  for node in v1.list_node().items:
      print(node.metadata.name, node.status.allocatable.get("nvidia.com/gpu"),
            node.metadata.annotations.get("hami.io/node-nvidia-register"))
  EOF

Container output (no `kubectl logs`): {root}/containers/<namespace>_<pod>_<container>.out
Ctrl-C stops everything.
"""


def main(argv: Optional[List[str]] = None) -> int:
    """Runs `cluster up` until interrupted."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE if not argv else parser().format_help())
        return EXIT_USAGE if not argv else EXIT_OK
    if argv[0] != "up":
        print(f"hami-sim cluster: unknown action {argv[0]!r}\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    args = parser().parse_args(argv[1:])
    body = serve
    if args.install != "processes" and not args.real:
        print("hami-sim cluster up: --install helm needs --real", file=sys.stderr)
        return EXIT_USAGE
    if args.real:
        from hami_sim.realcluster.cli import serve_real as body
    return run_command("hami-sim cluster up", args.examples,
                       lambda ex, rep: body(args, ex, rep),
                       "stopped: everything `cluster up` started has been stopped", EXIT_OK,
                       with_examples=args.with_examples)


def serve(args, examples, reporter) -> int:
    """Starts the cluster and its control loops; returns when a piece dies (or raises
    KeyboardInterrupt on Ctrl-C/SIGTERM, after stopping everything)."""
    from hami_sim.demo.cluster import ClusterError, SimCluster
    cluster = SimCluster(workdir=args.workdir, step=reporter.step, dashboard=True)
    loops = []
    try:
        with reporter.waiting("starting the API server double, hami-control and two nodes"):
            cluster.start()
        loops = start_loops(cluster, reporter)
        kubeconfig = cluster.kubeconfig
        if args.kubeconfig_out:
            shutil.copyfile(kubeconfig, args.kubeconfig_out)
            kubeconfig = Path(args.kubeconfig_out).resolve()
        reporter.line(hints(kubeconfig, cluster.root))
        reporter.line(f"Dashboard (read-only): {cluster.dashboard_url}\n")
        submit_examples(cluster, examples, reporter)
        return watch_until_broken(cluster, reporter, "hami-sim cluster up", cluster.root)
    except ClusterError as e:
        reporter.line(f"hami-sim cluster up: {e}")
        return EXIT_BROKEN
    finally:
        with signals_deferred():
            for loop in reversed(loops):
                loop.stop()
            cluster.stop()


def watch_until_broken(cluster, reporter, prog: str, logs) -> int:
    """Checks the cluster every second; EXIT_BROKEN, having said why, once a piece died."""
    while True:
        problems = cluster.problems()
        if problems:
            reporter.line(f"{prog}: {'; '.join(problems)}\n(logs under {logs}; stopping "
                          "everything)")
            return EXIT_BROKEN
        time.sleep(1.0)


def start_loops(cluster, reporter) -> list:
    """The scheduler double and the container runtime, started."""
    from hami_sim.demo.runtime import PodRuntime
    from hami_sim.demo.scheduler import RefusalNews, SchedulerDouble
    refusals = RefusalNews()

    def scheduled(attempt):
        line = (f"{attempt.key}: bound to {attempt.node} through the extender"
                if attempt.scheduled else refusals.line(attempt))
        if line:
            reporter.step(line)
    loops = []
    try:
        loops.append(SchedulerDouble(cluster.core_v1, cluster.control.client, notify=scheduled,
                                     log=reporter.step).start())
        loops.append(PodRuntime(cluster.nodes, cluster.root / "containers",
                                notify=reporter.step).start())
    except BaseException:
        for loop in loops:
            loop.stop()
        raise
    return loops


def submit_examples(cluster, examples, reporter) -> None:
    """Submits the examples (the API server calls the webhook, as in the demo)."""
    from hami_sim.demo.admission import AdmissionDenied, submit
    for ex in examples:
        try:
            submit(cluster.core_v1, ex.pod, ex.namespace)
            reporter.step(f"{ex.namespace}/{ex.name} submitted: {ex.shows}")
        except AdmissionDenied as e:
            reporter.step(f"{ex.namespace}/{ex.name}: not admitted: {e}")
