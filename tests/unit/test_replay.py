"""The trace replay on small hand-made traces with known answers."""
import json

import pytest

from hami_sim.replay import cli
from hami_sim.replay.arrivals import arrivals
from hami_sim.replay.quotas import load_quotas
from hami_sim.replay.run import InProcessPlacer, allocation_curve, cluster_view, replay
from hami_sim.replay.trace import TraceError, TracePod, load_nodes, load_pods

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase\n"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def run_list(tmp_path, nodes, pods, policy="bestfit"):
    """Place the pods in the given order; returns (view, placed names)."""
    node_rows = load_nodes(write(tmp_path, "n.csv", NODE_HEADER + nodes))
    pod_rows = load_pods(write(tmp_path, "p.csv", POD_HEADER + pods))
    view = cluster_view(node_rows)
    placer = InProcessPlacer(view, policy, 42, pod_rows)
    placed = [p.name for p in pod_rows if placer.place(p.pod_object()) is not None]
    return view, placed


@pytest.mark.parametrize("policy", ["bestfit", "fragaware", "random", "fgd", "binpack"])
def test_cpu_and_memory_fit_like_kube_scheduler(tmp_path, policy):
    _, placed = run_list(tmp_path, "n1,8000,16384,2,T4\n",
                         "cpu-a,5000,1024,1,1000,,LS,Running\n"
                         "cpu-b,5000,1024,1,1000,,LS,Running\n"
                         "mem-c,1000,20000,0,0,,LS,Running\n"
                         "ok-d,3000,1024,0,0,,LS,Running\n", policy)
    assert placed == ["cpu-a", "ok-d"]


@pytest.mark.parametrize("policy", ["bestfit", "fragaware", "fgd"])
def test_model_constraints(tmp_path, policy):
    view, placed = run_list(tmp_path, "t4,64000,65536,1,T4\nv100,64000,65536,1,V100M32\n",
                            "want-v100,1000,1024,1,1000,V100M32,LS,Running\n"
                            "want-v100-again,1000,1024,1,1000,V100M32|V100M16,LS,Running\n"
                            "any,1000,1024,1,1000,,LS,Running\n"
                            "want-t4,1000,1024,1,1000,T4,LS,Running\n", policy)
    assert placed == ["want-v100", "any"]
    assert view.reservation("trace/want-v100").node == "v100"


@pytest.mark.parametrize("policy", ["bestfit", "fragaware", "fgd"])
def test_sharing_and_whole_gpu_pods(tmp_path, policy):
    view, placed = run_list(tmp_path, "n1,64000,65536,2,T4\n",
                            "half-a,1000,1024,1,500,,LS,Running\n"
                            "half-b,1000,1024,1,500,,LS,Running\n"
                            "whole,1000,1024,1,1000,,LS,Running\n"
                            "sliver,1000,1024,1,100,,LS,Running\n"
                            "two,1000,1024,2,1000,,LS,Running\n", policy)
    assert placed == ["half-a", "half-b", "whole"]
    shares = sorted(d.usedcores for d in view.node("n1").devices)
    assert shares == [100, 100]          # the two halves share one GPU, the whole pod the other


def test_inflation_to_130_percent_keeps_every_pod_and_is_reproducible():
    pods = [TracePod(f"p{i}", 1000, 1024, 1, 500) for i in range(4)] + \
        [TracePod("cpu", 1000, 1024, 0, 0)]
    order = arrivals(pods, total_gpus=4, seed=7)
    demand = sum(p.demand_milli for p in order)
    assert demand <= 1.3 * 4000 < demand + 500
    assert sorted(p.name for p in order[:5]) == sorted(p.name for p in pods)
    assert [p.name for p in order] == [p.name for p in arrivals(pods, 4, 7)]
    assert [p.name for p in order] != [p.name for p in arrivals(pods, 4, 8)]


def test_inflation_drops_pods_when_the_list_asks_too_much():
    pods = [TracePod(f"p{i}", 1000, 1024, 1, 1000) for i in range(10)]
    assert sum(p.demand_milli for p in arrivals(pods, total_gpus=4, seed=1)) <= 5200


def test_readout_at_100_percent_is_the_mean_of_that_percent():
    total = 1      # one GPU: 10 thousandths is 1%
    points = [(990, 900), (995, 910), (1000, 950), (1004, 960), (1010, 960)]
    curve = allocation_curve(points, total, top=101)
    assert curve[100] == pytest.approx((91.0 + 95.0 + 96.0) / 3)
    assert curve[99] == pytest.approx(90.0)
    assert curve[98] == pytest.approx(90.0)  # no event rounds to 98: its neighbour 99 does
    assert curve[50] is None                 # nothing arrived by then
    assert curve[101] == pytest.approx(96.0)


def test_replay_records_allocation_against_arrived_demand(tmp_path):
    node_rows = load_nodes(write(tmp_path, "n.csv", NODE_HEADER + "n1,64000,65536,2,T4\n"))
    pod_rows = [TracePod("a", 1000, 1024, 1, 1000), TracePod("b", 1000, 1024, 2, 1000),
                TracePod("c", 1000, 1024, 1, 1000)]
    view = cluster_view(node_rows)
    result = replay(InProcessPlacer(view, "bestfit", 1, pod_rows), pod_rows, total_gpus=2)
    assert (result.pods, result.placed) == (3, 2)
    # events at 50%, 150% (refused: two whole GPUs are not free), 200% arrived demand
    assert result.curve[50] == 50.0
    assert result.curve[100] == 50.0        # no event near 100%: the last one below it
    assert result.curve[130] == 50.0


def test_trace_errors_name_file_row_and_column(tmp_path):
    with pytest.raises(TraceError, match=r"p.csv:2: column 'num_gpu'"):
        load_pods(write(tmp_path, "p.csv", POD_HEADER + "x,1,1,one,1000,,LS,Running\n"))
    with pytest.raises(TraceError, match="multiple of 10"):
        load_pods(write(tmp_path, "p.csv", POD_HEADER + "x,1,1,1,455,,LS,Running\n"))
    with pytest.raises(TraceError, match="cannot read"):
        load_nodes(str(tmp_path / "missing.csv"))


def test_cli_json_summary_and_reproducibility(tmp_path, capsys):
    nodes = write(tmp_path, "n.csv", NODE_HEADER + "".join(
        f"n{i},32000,65536,{2 + i % 2},{'T4' if i % 2 else 'G2'}\n" for i in range(6)))
    pods = write(tmp_path, "p.csv", POD_HEADER + "".join(
        f"p{i},{2000 + 1000 * (i % 5)},4096,{1 if i % 4 else 0},{(i % 9 + 1) * 100 if i % 4 else 0}"
        f",{'T4' if i % 7 == 0 and i % 4 else ''},LS,Running\n" for i in range(40)))
    args = ["--nodes", nodes, "--pods", pods, "--seeds", "1-2", "--workers", "1", "--json"]
    assert cli.main(args) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"gpu_alloc_pct", "per_seed", "pods", "seconds", "curve"} <= set(first)
    assert set(first["per_seed"]) == {"1", "2"} and first["overcommitted_devices"] == 0
    assert cli.main(args) == 0
    second = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert second["per_seed"] == first["per_seed"] and second["curve"] == first["curve"]


@pytest.mark.parametrize("args, message", [
    (["--seeds", "9-3"], "runs backwards"), (["--seeds", "x"], "numbers and ranges"),
    (["--ratio", "0"], "--ratio"),
], ids=["backwards", "garbage", "ratio"])
def test_cli_refuses_bad_arguments(tmp_path, capsys, args, message):
    nodes = write(tmp_path, "n.csv", NODE_HEADER + "n1,1000,1000,1,T4\n")
    pods = write(tmp_path, "p.csv", POD_HEADER + "p,1,1,1,100,,LS,Running\n")
    assert cli.main(["--nodes", nodes, "--pods", pods] + args) == 2
    assert message in capsys.readouterr().err


def test_cli_reports_a_missing_file(tmp_path, capsys):
    assert cli.main(["--nodes", str(tmp_path / "nope.csv"), "--pods", "x.csv"]) == 2
    assert "cannot read trace file" in capsys.readouterr().err


def test_quotas_deal_pods_to_namespaces_and_keep_each_within_its_quota(tmp_path, capsys):
    nodes = write(tmp_path, "n.csv", NODE_HEADER + "n1,64000,65536,4,T4\n")
    pods = write(tmp_path, "p.csv", POD_HEADER + "".join(
        f"p{i},1000,1024,1,500,,LS,Running\n" for i in range(8)))
    quotas = write(tmp_path, "q.json", json.dumps({
        "a": {"limits.nvidia.com/gpucores": "100"}, "b": {}}))
    view = cluster_view(load_nodes(nodes))
    placer = InProcessPlacer(view, "bestfit", 42, load_pods(pods), quotas=load_quotas(quotas))
    placed = [placer.place(p.pod_object()) is not None for p in load_pods(pods)]
    # a (pods 0, 2, 4, 6) stops at two 50% pods; b (1, 3, 5, 7) has no limit
    assert placed == [True, True, True, True, False, True, False, True]
    assert view.namespace_used("a").cores == 100 and view.namespace_used("b").cores == 200
    args = ["--nodes", nodes, "--pods", pods, "--seeds", "1", "--workers", "1", "--json"]
    assert cli.main(args + ["--quotas", quotas]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["quotas"] == quotas


@pytest.mark.parametrize("text, message", [
    ("[]", "expected an object"), ("{\"a\": 3}", "must map to an object"),
    ("{\"a\": {\"limits.nvidia.com/gpumem\": \"1.5\"}}", "whole number"), ("{", "JSON"),
], ids=["list", "not-object", "bad-value", "garbage"])
def test_quota_file_errors_say_what_to_fix(tmp_path, capsys, text, message):
    nodes = write(tmp_path, "n.csv", NODE_HEADER + "n1,1000,1000,1,T4\n")
    pods = write(tmp_path, "p.csv", POD_HEADER + "p,1,1,1,100,,LS,Running\n")
    quotas = write(tmp_path, "q.json", text)
    assert cli.main(["--nodes", nodes, "--pods", pods, "--quotas", quotas]) == 2
    assert message in capsys.readouterr().err
