"""GPU tier: one set of tests, two places.

On a machine where a real NVIDIA driver answers (a lent GPU machine, `tests/gpu/run.sh`), the
tests run against the real GPU; everywhere else (`make test`) they run against the simulated
GPU (hami_sim's libcuda.so.1 / libnvidia-ml.so.1, which serve NVIDIA's own CUDA runtime and
PyTorch). The GPU work always runs in child processes: `gpu_env` is their environment, and its
HAMI_TEST_PYTHON names their interpreter (one with PyTorch, cuda-bindings and nvidia-ml-py);
`gpuhelpers.child(env, ...)` is the command line that starts one. On the real
GPU every trace of the simulated driver is removed from `gpu_env`, so a child can never talk to
the simulator by accident.

The simulated GPU times kernels but does not compute them (memcpy and memset contents are
real): a test that asserts a kernel's computed output is marked `computes_results` and runs only
on a real GPU. Nothing else is skipped for want of a GPU.

Imports only pytest and the standard library at module level, so that it works on GPU machines
that have just PyTorch, cuda-bindings, nvidia-ml-py, grpcio, psutil and pytest.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "hami_node/shim/lib/libvgpu.so"
SIM_LIB = ROOT / "hami_sim/lib"
TORCH_VENV_PYTHON = ROOT / ".venv/torch/bin/python"

SIM_VARS = ("HAMI_SIM_GPUS", "HAMI_SIM_STATE", "HAMI_SIM_UUID_SEED", "HAMI_SIM_CTX_OVERHEAD",
            "HAMI_SIM_MODULE_MEM", "HAMI_SIM_PID_OFFSET", "HAMI_SIM_VISIBLE_DEVICES")
# What a container gets from the shim: a child inherits none of it from the test run.
SHIM_VARS = ("LD_PRELOAD", "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT",
             "CUDA_DEVICE_MEMORY_SHARED_CACHE", "PYTORCH_CUDA_ALLOC_CONF")

PROBE = r'''
import ctypes, sys
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError:
    sys.exit(3)
count = ctypes.c_int(0)
if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
    sys.exit(5)
maps = open("/proc/self/maps").read()
sys.exit(4 if "hami_sim/lib" in maps else 0)
'''


def real_gpu_environment(base=None):
    """os.environ without the simulated driver on the library path or its variables."""
    env = dict(os.environ if base is None else base)
    for var in SIM_VARS + SHIM_VARS:
        env.pop(var, None)
    paths = [p for p in env.get("LD_LIBRARY_PATH", "").split(":")
             if p and "hami_sim" not in p]
    env["LD_LIBRARY_PATH"] = ":".join(paths)
    return env


def _real_gpu_present() -> bool:
    try:
        probe = subprocess.run([sys.executable, "-c", PROBE], env=real_gpu_environment(),
                               capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


REAL_GPU = _real_gpu_present()
TARGET = "real" if REAL_GPU else "sim"


def pytest_configure(config):
    config.addinivalue_line("markers", "computes_results: asserts what a kernel computed "
                            "(runs on a real GPU only: the simulated GPU does not compute)")


def pytest_report_header(config):
    return f"tests/gpu target: {'the real GPU' if REAL_GPU else 'the simulated GPU'}"


def pytest_collection_modifyitems(config, items):
    """On the simulated GPU, skips exactly the tests that assert computed results."""
    if REAL_GPU:
        return
    skip = pytest.mark.skip(reason="asserts a kernel's computed output: the simulated GPU "
                                   "times kernels but does not compute them")
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here) and item.get_closest_marker("computes_results"):
            item.add_marker(skip)


@pytest.fixture
def gpu_target():
    """'real' on a real GPU, 'sim' on the simulated one."""
    return TARGET


@pytest.fixture
def gpu_env(tmp_path, gpu_python):
    """Environment for child processes that reach the GPU of this place. On the simulated GPU
    each test gets a state of its own (no memory or processes left by another test)."""
    env = real_gpu_environment()
    env["HAMI_TEST_PYTHON"] = gpu_python
    if REAL_GPU:
        return env
    if not (SIM_LIB / "libcuda.so.1").is_file():
        subprocess.run(["make", "-s", "-C", str(ROOT / "c")], check=True, timeout=600)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(SIM_LIB), env["LD_LIBRARY_PATH"]) if p)
    env["HAMI_SIM_STATE"] = str(tmp_path / "sim-state")
    # A wave of blocks costs 250 us here (the simulator's default is 10 us): a 4096 x 4096
    # FP32 matmul then takes ~1.3 ms (an H200 takes ~2.5, an A100 ~7), so that the tier's
    # PyTorch loops keep the device busy, as they do a real GPU, instead of being bound by
    # Python's launch overhead on a loaded 2-core machine.
    env.setdefault("HAMI_SIM_WAVE_NS", "250000")
    return env


@pytest.fixture(scope="session")
def gpu_python():
    """An interpreter with PyTorch: this one when it has it (the GPU machines), else the
    project's (`make test` installs it: tools/torch/install.sh)."""
    try:
        import torch  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    if REAL_GPU:
        pytest.skip("PyTorch is not installed on this GPU machine")
    if not TORCH_VENV_PYTHON.is_file():
        pytest.fail(f"{TORCH_VENV_PYTHON} is missing: run `make torch` (or `make test`), which "
                    "installs PyTorch's CUDA wheel for the GPU tier")
    return str(TORCH_VENV_PYTHON)


@pytest.fixture(scope="session")
def libvgpu():
    """The built shim (builds the C libraries when missing: no pip needed)."""
    if not LIB.is_file():
        subprocess.run(["make", "-s", "-C", str(ROOT / "c")], check=True, timeout=600)
    return LIB
