"""`hami-sim demo` (also `make demo`): the whole system on a simulated cluster.

Starts the API server double, hami-control (HTTPS) and two simulated GPU nodes with different
GPU models (hami-node + kubelet double each), submits the example pods of examples/ through the
webhook, lets the extender place and bind them, runs each container's command against its
node's simulated GPUs with what Allocate returned, prints a table per pod and exits 1 if any
pod missed its `demo.hami.io/expect`. `--gpu-tour` runs the short tour of the simulated GPUs.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from typing import List, Optional

EXIT_OK, EXIT_EXPECTATION, EXIT_USAGE, EXIT_BROKEN, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def parser() -> argparse.ArgumentParser:
    """The command line."""
    from hami_sim.demo.scenario import DEFAULT_TIMEOUT_S
    p = argparse.ArgumentParser(prog="hami-sim demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu-tour", action="store_true",
                   help="only the tour of the simulated GPUs (no cluster)")
    p.add_argument("--examples", metavar="DIR",
                   help="folder of example pod manifests (default: the repository's examples/)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds to wait for the pods to settle (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--keep", action="store_true",
                   help="keep the work directory (logs, kubeconfig, container output)")
    return p


def terminate_as_interrupt() -> None:
    """SIGTERM ends the demo like Ctrl-C: through the same clean-up."""
    def handler(_sig, _frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)


@contextlib.contextmanager
def signals_deferred():
    """Ctrl-C and SIGTERM wait while the block runs (the clean-up), then act."""
    caught = []
    previous = {sig: signal.signal(sig, lambda n, _f: caught.append(n))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            raise KeyboardInterrupt


def quiet_grpc() -> None:
    """gRPC's C core logs connection teardown at INFO on stderr; the demo's output is its own."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the demo; the exit status says whether every expectation held."""
    args = parser().parse_args(argv if argv is not None else sys.argv[1:])
    if args.gpu_tour:
        from hami_sim.demo import gpu_tour
        return gpu_tour.main([])
    return run_command("hami-sim demo", args.examples, lambda ex, rep: run(ex, rep, args),
                       "interrupted: everything the demo started has been stopped",
                       EXIT_INTERRUPTED)


def run_command(prog: str, examples_dir, body, interrupted: str, interrupted_code: int,
                with_examples: bool = True) -> int:
    """What both commands do around their work: signals, the examples (a bad one is exit 2
    before anything starts), a reporter, and Ctrl-C ending in a clean line."""
    from hami_sim.demo.examples import ExampleError, load_examples
    from hami_sim.demo.report import Reporter
    quiet_grpc()
    terminate_as_interrupt()
    try:
        examples = load_examples(examples_dir) if with_examples else []
    except ExampleError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_USAGE
    reporter = Reporter()
    try:
        return body(examples, reporter)
    except KeyboardInterrupt:
        reporter.line(interrupted)
        return interrupted_code


def run(examples, reporter, args) -> int:
    """Starts the cluster, runs the scenario, prints the table; stops everything."""
    from hami_sim.demo.cluster import ClusterError, SimCluster
    from hami_sim.demo.report import HEADERS, checks_text, format_table, pod_row
    from hami_sim.demo.scenario import ScenarioError, run_scenario
    reporter.step(f"hami-py demo: {len(examples)} example pods on a simulated cluster of two "
                  "GPU nodes (no GPU, no Kubernetes needed)")
    cluster = SimCluster(step=reporter.step, keep=args.keep, record_busy=True)
    try:
        with reporter.waiting("starting the API server double, hami-control and two nodes"):
            cluster.start()
        result = run_scenario(cluster, examples, reporter, timeout=args.timeout)
    except (ClusterError, ScenarioError) as e:
        reporter.line(f"hami-sim demo: the simulated cluster failed: {e}")
        return EXIT_BROKEN
    finally:
        if args.keep:
            reporter.line(f"work directory kept: {cluster.root}")
        with signals_deferred(), reporter.waiting("stopping everything"):
            cluster.stop()
    reporter.line()
    reporter.line(format_table(HEADERS, [pod_row(p) for p in result.pods]))
    reporter.line()
    reporter.line("checks (demo.hami.io/expect of each example):")
    reporter.line(checks_text(result.pods))
    reporter.line()
    failed = [p.name for p in result.pods if not p.ok]
    if failed:
        reporter.line(f"FAILED: {', '.join(failed)} did not do what their examples expect "
                      f"({reporter.elapsed():.1f} s)")
        return EXIT_EXPECTATION
    reporter.line(f"all {len(result.pods)} pods did what their examples expect "
                  f"({reporter.elapsed():.1f} s)")
    return EXIT_OK
