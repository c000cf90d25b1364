"""The shim inside a MIG instance (simulated A100-40GB, a 1g.5gb instance): CUDA's _v2 UUID of
the device is the instance's own, so the shim names its record MIG-<uuid> (what NVML finds),
counts its contexts' memory through NVML as on a whole GPU, and holds gpumem and gpucores
against the instance."""
import subprocess
import sys


import pytest

from hami_sim.gpu import sim_env

MAKE = '''
import json, pynvml
from hami_node.plugin.mig_nvml import NvmlMig
from hami_common.mig import MigPlacement
pynvml.nvmlInit()
uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
mig = NvmlMig()
mig.enable(uuid)
print(json.dumps(mig.create(uuid, "1g.5gb", MigPlacement(6, 1)).mig_uuid))
'''

FILL = '''
context()
total = ok(cu.cuDeviceTotalMem(ok(cu.cuDeviceGet(0))))
held = 0
while cu.cuMemAlloc(128 * MiB)[0] == cu.CUresult.CUDA_SUCCESS:
    held += 128
say(total=total // MiB, held=held)
'''

SPIN = '''
context()
mod = ok(cu.cuModuleLoadData(b"spin"))
spin = ok(cu.cuModuleGetFunction(mod, b"spin"))
ns = ctypes.c_uint64(10_000_000)
args = (ctypes.c_void_p * 1)(ctypes.addressof(ns))
launch = lambda: ok(cu.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, 0, ctypes.addressof(args), 0))
for _ in range(20):                      # settle
    launch(); ok(cu.cuCtxSynchronize())
start, n = time.monotonic(), 0
while time.monotonic() - start < 2.5:
    launch(); ok(cu.cuCtxSynchronize()); n += 1
say(share=n * 0.010 / (time.monotonic() - start))
'''


@pytest.fixture
def instance(shim, tmp_path):
    """(the shim harness, its children seeing only a 1g.5gb instance of an A100-40GB; the
    instance's MIG UUID); contexts cost 256 MiB."""
    shim.env = sim_env(gpus="40g/108/NVIDIA A100-SXM4-40GB", state_dir=tmp_path / "mig-sim",
                       ctx_overhead=str(256 << 20), module_memory="0")
    out = subprocess.run([sys.executable, "-c", MAKE], env=shim.env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    mig_uuid = out.stdout.strip().strip('"')
    shim.env = dict(shim.env, CUDA_VISIBLE_DEVICES=mig_uuid)
    return shim, mig_uuid


def test_gpumem_holds_inside_the_instance_with_its_context_counted(instance):
    shim, mig_uuid = instance
    [row], _, _ = shim.run(FILL, limit="1g")
    # the instance's 4864 MiB capped at 1 GiB, of which the context's 256 MiB counted by NVML
    assert row == {"total": 1024, "held": 768}
    [device] = shim.usage().devices
    assert device.uuid == mig_uuid                       # NVML's name for the instance
    shim.cache = shim.tmp / "alone.cache"       # a container of its own
    [alone], _, _ = shim.run(FILL, limit=None)
    assert alone == {"total": 4864, "held": 4864 - 256 - 4864 % 128}


def test_gpucores_holds_inside_the_instance(instance):
    shim, _ = instance
    [free], _, _ = shim.run(SPIN, limit=None)
    shim.cache = shim.tmp / "capped.cache"      # a container of its own
    [capped], _, _ = shim.run(SPIN, limit=None, extra=("--gpu-cores", "30"))
    assert free["share"] > 0.85, free
    assert abs(capped["share"] - 0.30) <= 0.08, capped
