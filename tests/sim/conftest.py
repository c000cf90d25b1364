"""Simulated-GPU tier: real child processes driving the simulated libcuda / libnvidia-ml
through cuda-python and pynvml. Each test gets its own state directory."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from hami_sim.gpu import sim_env

# Prepended to every child script: small helpers around cuda-python's (err, value) tuples.
PRELUDE = textwrap.dedent('''
    import ctypes, json, os, sys, time
    from cuda.bindings import driver as cu

    def ok(ret):
        err, *rest = ret
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(repr(err))
        return rest[0] if len(rest) == 1 else (rest or None)

    def error_name(ret):
        return (ret[0] if isinstance(ret, tuple) else ret).name

    def context(dev=0):
        ok(cu.cuInit(0))
        return ok(cu.cuCtxCreate(None, 0, ok(cu.cuDeviceGet(dev))))

    def used():
        """Device memory in use on the current context's device, as cuMemGetInfo sees it."""
        free, total = ok(cu.cuMemGetInfo())
        return total - free

    def spin_function():
        module = ok(cu.cuModuleLoadData(b"any image will do"))
        return ok(cu.cuModuleGetFunction(module, b"spin"))

    def spin(f, ns, stream=0, blocks=1):
        ok(cu.cuLaunchKernel(f, blocks, 1, 1, 1, 1, 1, 0, stream,
                             ((ns,), (ctypes.c_uint64,)), 0))

    def say(**kw):
        print(json.dumps(kw), flush=True)
''')


class SimGpu:
    """Runs Python children against one set of simulated GPUs; kills them all at the end."""

    def __init__(self, state_dir, gpus, realistic=False):
        # Most tests here check allocation arithmetic exactly: contexts and modules cost
        # nothing unless a test asks for the realistic defaults.
        free = {} if realistic else {"ctx_overhead": "0", "module_memory": "0"}
        self.env = sim_env(gpus=gpus, state_dir=state_dir, **free)
        self.state_dir = state_dir
        self.children = []

    def spawn(self, code, env=None, args=(), prefix=(), **kw):
        """Starts a child running PRELUDE + code (sys.argv[1:]: args; through `prefix`, a
        command such as unshare) in its own process group."""
        proc = subprocess.Popen([*prefix, sys.executable, "-c", PRELUDE + textwrap.dedent(code),
                                 *args],
                                env=env or self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)
        self.children.append(proc)
        return proc

    def run(self, code, env=None, timeout=30, check=True, prefix=()):
        """Runs a child to completion; returns (stdout lines as JSON objects, stderr)."""
        proc = self.spawn(code, env=env, prefix=prefix)
        out, err = proc.communicate(timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"child failed ({proc.returncode}):\n{err}")
        return [json.loads(line) for line in out.splitlines() if line], err

    def close(self):
        for proc in self.children:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()


@pytest.fixture
def sim(tmp_path):
    """Two small simulated GPUs in a private state directory."""
    gpu = SimGpu(tmp_path / "state", "4g/8/NVIDIA A100-SXM4-40GB,2g/4/Tesla T4")
    yield gpu
    gpu.close()


@pytest.fixture
def make_sim(tmp_path):
    """Factory for simulated GPUs with a chosen HAMI_SIM_GPUS."""
    made = []

    def make(gpus, name="state"):
        gpu = SimGpu(tmp_path / name, gpus)
        made.append(gpu)
        return gpu

    yield make
    for gpu in made:
        gpu.close()
