"""`hami-sim run | env | status | inject-xid` as a user runs them."""
import json
import subprocess
import sys

HAMI_SIM = [sys.executable, "-m", "hami_sim.cli"]


def hami_sim(*args, env, **kw):
    return subprocess.run([*HAMI_SIM, *args], env=env, capture_output=True, text=True,
                          timeout=60, **kw)


def test_run_and_status_show_memory_processes_and_utilization(sim):
    holder = sim.spawn('''
        ctx = context(1)
        p = ok(cu.cuMemAlloc(512 * 1024**2))
        f, stream = spin_function(), ok(cu.cuStreamCreate(0))
        spin(f, 300_000_000, stream)            # the device is busy for the next 300 ms
        say(ready=True)
        sys.stdin.readline()
    ''', stdin=subprocess.PIPE)
    assert json.loads(holder.stdout.readline()) == {"ready": True}
    result = hami_sim("status", "--json", env=sim.env)
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)
    assert [d["total_bytes"] for d in devices] == [4 << 30, 2 << 30]
    assert devices[1]["used_bytes"] == 512 << 20
    assert devices[1]["processes"][0]["pid"] == holder.pid and devices[1]["utilization"] > 0
    text = hami_sim("status", "--state", str(sim.state_dir), env=sim.env).stdout
    assert "Tesla T4" in text and f"pid {holder.pid:>8}" in text
    holder.stdin.close()
    holder.wait(timeout=10)


def test_run_puts_the_simulated_driver_in_front(sim):
    code = "import os; print(os.environ['LD_LIBRARY_PATH'].split(':')[0], os.environ['HAMI_SIM_GPUS'])"
    result = hami_sim("run", "--gpus", "8g", "--", sys.executable, "-c", code, env=sim.env)
    first, gpus = result.stdout.split()
    assert first.endswith("hami_sim/lib") and gpus == "8g"
    missing = hami_sim("run", "--", "no-such-program-here", env=sim.env)
    assert missing.returncode == 127 and "no-such-program-here" in missing.stderr


def test_env_prints_evaluable_exports(sim):
    result = hami_sim("env", "--gpus", "8g/40/Tesla T4", "--state", "/tmp/x y", env=sim.env)
    lines = result.stdout.splitlines()
    assert "export HAMI_SIM_GPUS='8g/40/Tesla T4'" in lines
    assert "export HAMI_SIM_STATE='/tmp/x y'" in lines
    shell = subprocess.run(["bash", "-c", result.stdout + 'echo "$HAMI_SIM_GPUS"'],
                           capture_output=True, text=True, timeout=30)
    assert shell.stdout.strip() == "8g/40/Tesla T4"


def test_status_without_state_and_bad_xid_device_fail_clearly(tmp_path, sim):
    env = {**sim.env, "HAMI_SIM_STATE": str(tmp_path / "never-used")}
    result = hami_sim("status", env=env)
    assert result.returncode == 1 and "has any program used the simulated GPUs" in result.stderr
    result = hami_sim("inject-xid", "7", "79", env=sim.env)
    assert result.returncode == 1 and "no simulated device 7" in result.stderr


def test_demo_tours_devices_kernels_and_out_of_memory(sim):
    result = hami_sim("demo", "--gpu-tour", env=sim.env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "GPU 0: NVIDIA A100-SXM4-40GB" in out and "GPU 1: Tesla T4" in out
    assert "spin: 20 kernels of 5 ms" in out
    assert "another 8 GiB -> CUDA_ERROR_OUT_OF_MEMORY" in out
