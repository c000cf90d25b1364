"""hami-run and hami-smi as real commands against the simulated GPUs."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import textwrap

from tests_shim_common import PRELUDE
from tests_shim_common import ROOT

MiB = 1 << 20

SHOW = '''
    ok(cu.cuInit(0))
    n = ok(cu.cuDeviceGetCount())
    say(count=n, totals=[ok(cu.cuDeviceTotalMem(ok(cu.cuDeviceGet(i)))) for i in range(n)],
        env={k: v for k, v in os.environ.items() if k.startswith(("CUDA_DEVICE", "HAMI_SIM_V"))},
        cache_exists=os.path.exists(os.environ["CUDA_DEVICE_MEMORY_SHARED_CACHE"]))
'''


def hami(*argv, env=None, tool="run"):
    """Runs hami-run / hami-smi as the console scripts do."""
    return subprocess.run([sys.executable, "-m", f"hami_node.shim.{tool}", *argv], env=env,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_devices_cores_and_percent_reach_the_command(shim):
    out, _, _ = shim.run(SHOW, limit=None,
                         extra=["--devices", "1", "--gpu-cores", "30", "--gpu-mem-percent", "25"])
    cache = out[0]["env"].pop("CUDA_DEVICE_MEMORY_SHARED_CACHE")
    assert out == [{"count": 1, "totals": [512 * MiB], "cache_exists": True,
                    "env": {"CUDA_DEVICE_MEMORY_LIMIT_0": "512m", "CUDA_DEVICE_SM_LIMIT": "30",
                            "HAMI_SIM_VISIBLE_DEVICES": "1"}}]
    assert cache == str(shim.cache)


def test_a_fresh_shared_file_per_invocation_is_removed_afterwards(shim):
    done = hami("--sim", "--gpu-mem", "1g", "--", sys.executable, "-c",
                "import os; print(os.environ['CUDA_DEVICE_MEMORY_SHARED_CACHE'])", env=shim.env)
    assert done.returncode == 0, done.stderr
    cache = done.stdout.strip()
    assert cache.endswith("/vgpu.cache") and "hami-run-" in cache
    assert not Path(cache).exists()


def test_exit_status_signals_and_mistakes(shim):
    assert hami("--sim", "--", "sh", "-c", "exit 7", env=shim.env).returncode == 7
    assert hami("--sim", "--", "sh", "-c", "kill -TERM $$", env=shim.env).returncode == \
        128 + signal.SIGTERM
    missing = hami("--sim", "--", "no-such-command-here", env=shim.env)
    assert missing.returncode == 127 and "cannot run 'no-such-command-here'" in missing.stderr
    for argv, says in [(["--gpu-mem", "1gb", "--", "true"], "--gpu-mem='1gb' is not a size"),
                       (["--gpu-mem", "1g"], "give the command to run after --"),
                       (["--gpu-cores", "150", "--", "true"], "--gpu-cores 150 must be"),
                       (["--gpu-mem-percent", "0", "--", "true"], "must be above 0"),
                       (["--devices", "0;1", "--", "true"], "give GPU indices or UUIDs")]:
        done = hami(*argv, env=shim.env)
        assert done.returncode == 2 and says in done.stderr, (argv, done.stderr)
    both = hami("--gpu-mem", "1g", "--gpu-mem-percent", "5", "--", "true", env=shim.env)
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_hami_smi_shows_live_processes_and_forgets_dead_ones(shim):
    holder = shim.watch('''
        ctx = context(0)
        p = ok(cu.cuMemAlloc(300 * MiB))
        say(pid=os.getpid())
        sys.stdin.readline()
    ''', stdin=subprocess.PIPE)
    pid = shim.next_line(holder)["pid"]
    table = hami("--cache", str(shim.cache), tool="smi")
    assert table.returncode == 0
    assert "300.0 MiB     1.0 GiB" in table.stdout and f"{pid:>8}    0   300.0 MiB" in table.stdout
    view = json.loads(hami("--cache", str(shim.cache), "--json", tool="smi").stdout)
    assert view["devices"][0]["used"] == 300 * MiB and view["devices"][0]["limit"] == 1 << 30
    assert [{k: p[k] for k in ("pid", "priority", "used")} for p in view["processes"]] == [
        {"pid": pid, "priority": 0, "used": {"0": 300 * MiB}}]
    shim.kill(holder)
    holder.wait()
    view = json.loads(hami("--cache", str(shim.cache), "--json", tool="smi").stdout)
    assert view["processes"] == [] and view["devices"][0]["used"] == 0
    broken = hami("--cache", str(shim.tmp / "nothing.cache"), tool="smi")
    assert broken.returncode == 1 and "no such shared accounting file" in broken.stderr


def test_a_cap_below_a_context_is_refused_before_the_command_runs(shim):
    """hami-run --gpu-mem 1024 means 1024 bytes (HAMi's unit): less than the context the
    simulated A100 charges (its realistic default), so hami-run says so and runs nothing."""
    env = {k: v for k, v in shim.env.items() if k != "HAMI_SIM_CTX_OVERHEAD"}
    done = hami("--sim", "--gpu-mem", "1024", "--", sys.executable, "-c", "print('ran')",
                env=env)
    assert done.returncode == 2 and "ran" not in done.stdout
    assert "less than the 430 MiB a CUDA context takes" in done.stderr, done.stderr
    assert "did you mean --gpu-mem 1024m" in done.stderr


def test_the_shim_refuses_a_context_that_alone_passes_the_cap(shim):
    """Under a cap smaller than a context (set directly, past hami-run), the first context is
    created, found over the cap by the driver's count and destroyed again: CUDA_ERROR_OUT_OF_
    MEMORY and a log line that names the unit; the next attempt is refused before the driver
    is asked (the context's cost is learnt)."""
    from hami_node.shim.settings import ShimSettings, shim_env
    base = {k: v for k, v in shim.env.items() if k != "HAMI_SIM_CTX_OVERHEAD"}
    env = shim_env(ShimSettings(memory_limit=1024, cache_path=str(shim.cache)), base=base)
    code = textwrap.dedent('''
        ok(cu.cuInit(0))
        dev = ok(cu.cuDeviceGet(0))
        first = cu.cuDevicePrimaryCtxRetain(dev)[0].name
        second = cu.cuCtxCreate(None, 0, dev)[0].name
        say(first=first, second=second)
    ''')
    done = subprocess.run([sys.executable, "-c", PRELUDE + code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"first": "CUDA_ERROR_OUT_OF_MEMORY",
                                       "second": "CUDA_ERROR_OUT_OF_MEMORY"}
    assert "over its limit of 1024 bytes" in done.stderr and "1024m is 1024 MiB" in done.stderr
