"""`hami-sim replay --http` on a small hand-made trace: every pod goes through the webhook,
the filter and the bind of a hami-control process against the API server double."""
import json
import subprocess
import sys

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"node-{i},64000,262144,{gpus},{model}\n"
    for i, (gpus, model) in enumerate([(2, "T4"), (4, "V100M32"), (1, "T4")]))
# 7 GPUs. Sharing pods (gpu_milli < 1000), whole-GPU pods, a model-constrained pod, a CPU-only
# pod and one that asks for more CPU than any node has.
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join([
    "share-a,4000,8192,1,500,\n", "share-b,4000,8192,1,300,\n", "whole,8000,16384,2,1000,\n",
    "v100,4000,8192,1,1000,V100M32\n", "cpu,2000,4096,0,0,\n", "huge,128000,8192,1,200,\n"])


def test_replay_over_http(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    proc = subprocess.run([sys.executable, "-m", "hami_sim.cli", "replay", "--nodes",
                           str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                           "--seeds", "42", "--http", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["bind_errors"] == 0 and summary["overcommitted_devices"] == 0
    assert summary["pods_per_s"] > 0 and 0 < summary["filter_p50_ms"] <= \
        summary["filter_p99_ms"]
    assert summary["placed"] < summary["pods"]      # "huge" fits no node's CPU
    assert summary["gpu_alloc_pct"] is not None
    assert "over HTTP:" in proc.stdout


def test_http_replay_refuses_baselines(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    proc = subprocess.run([sys.executable, "-m", "hami_sim.cli", "replay", "--nodes",
                           str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                           "--http", "--policy", "fgd"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "in-process baseline" in proc.stderr


def test_placer_reports_a_dead_helper_instead_of_waiting(tmp_path):
    """A helper process that dies (here: killed) makes the next placement fail at once with
    the helper named, not after the queue's two-minute timeout."""
    import time

    import pytest

    from hami_sim.control_launch import start_control
    from hami_sim.launch import start_apiserver
    from hami_sim.replay.http_placer import HttpPlacer, ReplayHttpError
    from hami_sim.replay.trace import load_nodes, load_pods
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    nodes, pods = load_nodes(tmp_path / "nodes.csv"), load_pods(tmp_path / "pods.csv")
    manifests = [p.pod_object(name=f"{p.name}-{i}") for i, p in enumerate(pods * 50)]
    apiserver = start_apiserver(process=True)
    control = start_control(str(apiserver.kubeconfig), process=True,
                            extra_args=["--no-leader-elect", "--handshake-interval", "0"])
    placer = HttpPlacer(apiserver.url, control.url, nodes, manifests)
    try:
        placer._workers[0].kill()
        start = time.monotonic()
        with pytest.raises(ReplayHttpError, match="admit-ahead helper exited"):
            for pod in manifests:         # what it queued before dying is placed first
                placer.place(pod)
        assert time.monotonic() - start < 30
    finally:
        placer.close()
        control.stop()
        apiserver.stop()
