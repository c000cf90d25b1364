"""End-to-end tier: the demo's scenario on a simulated cluster of real processes (API server
double, hami-control over TLS, two GPU nodes with hami-node and a kubelet double), and the
`hami-sim demo` / `hami-sim cluster up` commands themselves."""
from __future__ import annotations

import io
from dataclasses import dataclass

import pytest

from hami_sim.demo.cluster import SimCluster
from hami_sim.demo.examples import load_examples
from hami_sim.demo.report import Reporter
from hami_sim.demo.scenario import ScenarioResult, run_scenario
from hami_sim.testing import kubectl_binary  # noqa: F401 (a fixture, picked up by name)

from e2ehelpers import EXAMPLES, Command


@dataclass
class DemoRun:
    """The scenario's structured result, what it printed, and the cluster (still up)."""

    result: ScenarioResult
    output: str
    cluster: SimCluster


@pytest.fixture(scope="module")
def demo_run():
    """The demo's scenario, run once for the module; the cluster stays up until the end."""
    out = io.StringIO()
    reporter = Reporter(out, tty=False)
    cluster = SimCluster(step=reporter.step, record_busy=True)
    try:
        cluster.start()
        result = run_scenario(cluster, load_examples(EXAMPLES), reporter, timeout=60)
        yield DemoRun(result, out.getvalue(), cluster)
    finally:
        cluster.stop()


@pytest.fixture
def command():
    """Starts `hami-sim` commands; kills whatever is left of them after the test."""
    started = []

    def start(*args, env=None) -> Command:
        cmd = Command(*args, env=env)
        started.append(cmd)
        return cmd
    try:
        yield start
    finally:
        for cmd in started:
            cmd.kill()
