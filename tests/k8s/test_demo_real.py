"""The six example pods of `make demo` through the real stack, with the demo's expectations:
OOM at the gpumem cap, compute shares at the gpucores limits, two pods sharing one GPU, the
GPU-type filter, and a pod that cannot fit left Pending with the extender's reason."""
from __future__ import annotations

import pytest

from hami_sim.demo.examples import load_examples
from hami_sim.demo.report import HEADERS, checks_text, format_table, pod_row
from hami_sim.realcluster.scenario import run_real_scenario

pytestmark = pytest.mark.timeout(3600)


def test_examples_meet_their_expectations_on_real_kubernetes(real_cluster):
    examples = load_examples()
    result = run_real_scenario(real_cluster, examples, real_cluster.reporter, timeout=180)
    table = format_table(HEADERS, [pod_row(p) for p in result.pods])
    assert len(result.pods) == len(examples) == 6
    assert result.ok, f"\n{table}\n{checks_text(result.pods)}"
    assert not result.timed_out
    # The pods really went through the real pieces: our webhook set the scheduler name, and
    # the real kube-scheduler bound them through our extender to the kubelet's node.
    for pod in result.pods:
        if pod.expectation.outcome == "succeeds":
            assert pod.node == real_cluster.spec.name
