"""Device visibility (HAMI_SIM_VISIBLE_DEVICES as a container runtime, CUDA_VISIBLE_DEVICES as
the driver)."""
import pytest

MiB = 1 << 20

VIEW = '''
    import pynvml
    ok(cu.cuInit(0)); pynvml.nvmlInit()
    cuda = []
    for i in range(ok(cu.cuDeviceGetCount())):
        dev = ok(cu.cuDeviceGet(i))
        cuda.append([ok(cu.cuDeviceGetName(64, dev)).split(b"\\0")[0].decode(),
                     ok(cu.cuDeviceTotalMem(dev))])
    nvml = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        nvml.append([pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetIndex(h),
                     pynvml.nvmlDeviceGetMinorNumber(h)])
    say(cuda=cuda, nvml=nvml)
'''
A100, T4 = ["NVIDIA A100-SXM4-40GB", 4 << 30], ["Tesla T4", 2 << 30]


def uuids(sim):
    out, _ = sim.run('''
        import pynvml
        pynvml.nvmlInit()
        say(uuids=[pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                   for i in range(pynvml.nvmlDeviceGetCount())])
    ''')
    return out[0]["uuids"]


@pytest.mark.parametrize("container, cuda_visible, want_cuda, want_nvml", [
    ("1", None, [T4], [["Tesla T4", 0, 1]]),
    ("uuid1,uuid0", None, [T4, A100], [["Tesla T4", 0, 1], ["NVIDIA A100-SXM4-40GB", 1, 0]]),
    (None, "1,0", [T4, A100], [["NVIDIA A100-SXM4-40GB", 0, 0], ["Tesla T4", 1, 1]]),
    (None, "0,7,1", [A100], [["NVIDIA A100-SXM4-40GB", 0, 0], ["Tesla T4", 1, 1]]),
    (None, "uuid1", [T4], [["NVIDIA A100-SXM4-40GB", 0, 0], ["Tesla T4", 1, 1]]),
    ("1", "0", [T4], [["Tesla T4", 0, 1]]),
    ("none", None, [], []),
], ids=["container-index", "container-uuids-reordered", "cuda-reordered", "cuda-stops-at-bad",
        "cuda-uuid", "cuda-inside-container", "container-none"])
def test_visibility_renumbers_what_each_library_sees(sim, container, cuda_visible, want_cuda,
                                                     want_nvml):
    ids = uuids(sim)
    env = dict(sim.env)
    for var, value in (("HAMI_SIM_VISIBLE_DEVICES", container),
                       ("CUDA_VISIBLE_DEVICES", cuda_visible)):
        if value is not None:
            env[var] = value.replace("uuid0", ids[0]).replace("uuid1", ids[1][:12])
    out, _ = sim.run(VIEW, env=env)
    assert out[0] == {"cuda": want_cuda, "nvml": want_nvml}


def test_a_bad_container_list_is_one_line_and_no_devices(sim):
    env = dict(sim.env, HAMI_SIM_VISIBLE_DEVICES="0,5")
    out, err = sim.run('say(init=error_name(cu.cuInit(0)))', env=env)
    assert out == [{"init": "CUDA_ERROR_NO_DEVICE"}]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "HAMI_SIM_VISIBLE_DEVICES='0,5'" in lines[0] and "'5'" in lines[0]


def test_memory_is_charged_to_the_physical_device_behind_a_visible_index(sim):
    env = dict(sim.env, HAMI_SIM_VISIBLE_DEVICES="1")
    proc = sim.spawn('''
        ctx = context(0)
        p = ok(cu.cuMemAlloc(64 * 1024**2))
        say(ready=True)
        sys.stdin.readline()
    ''', env=env, stdin=-1)
    assert proc.stdout.readline().strip() == '{"ready": true}'
    out, _ = sim.run('''
        import pynvml
        pynvml.nvmlInit()
        say(used=[pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used
                  for i in range(2)])
    ''')
    proc.stdin.close()
    assert out == [{"used": [0, 64 * MiB]}]
