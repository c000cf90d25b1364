"""Real-GPU tier: runs only where a real NVIDIA driver answers; skipped everywhere else.

Imports only pytest and the standard library here, so that it works on GPU machines that
have just PyTorch, cuda-bindings, nvidia-ml-py, grpcio, psutil and pytest. Tests run their
GPU code in child processes with `real_gpu_env`, an environment with every trace of the
simulated driver removed, so they can never talk to the simulator by accident.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "hami_node/shim/lib/libvgpu.so"

SIM_VARS = ("HAMI_SIM_GPUS", "HAMI_SIM_STATE", "HAMI_SIM_UUID_SEED", "HAMI_SIM_CTX_OVERHEAD",
            "HAMI_SIM_MODULE_MEM", "HAMI_SIM_PID_OFFSET")

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
    for var in SIM_VARS:
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


def pytest_collection_modifyitems(config, items):
    """Skips every test of this folder when no real GPU answers."""
    if REAL_GPU:
        return
    skip = pytest.mark.skip(reason="no real NVIDIA GPU / driver on this machine")
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture
def real_gpu_env():
    """Environment for child processes that must reach the real driver."""
    return real_gpu_environment()


@pytest.fixture(scope="session")
def libvgpu():
    """The built shim (builds the C libraries when missing: no pip needed)."""
    if not LIB.is_file():
        subprocess.run(["make", "-s", "-C", str(ROOT / "c")], check=True, timeout=600)
    return LIB
