"""MIG on the simulated GPU, through the real clients (pynvml, cuda-python): profiles and
placements per model, the mode with its pending state, GPU and compute instances, MIG device
handles and UUIDs, and CUDA inside an instance (its memory and SMs, isolated from the others)."""
import textwrap

import pytest

NVML = '''
    import pynvml as N
    N.nvmlInit()
    gpu = N.nvmlDeviceGetHandleByIndex(0)

    def code(call, *args):
        try:
            call(*args)
            return "SUCCESS"
        except N.NVMLError as e:
            return {v: k for k, v in vars(N).items() if k.startswith("NVML_ERROR_")}[e.value]

    def enable(h=None):
        return N.nvmlDeviceSetMigMode(h or gpu, N.NVML_DEVICE_MIG_ENABLE)

    def profile(index, h=None):
        return N.nvmlDeviceGetGpuInstanceProfileInfo(h or gpu, index)

    def make(index, start=None, h=None):
        info = profile(index, h)
        if start is None:
            gi = N.nvmlDeviceCreateGpuInstance(h or gpu, info.id)
        else:
            place = N.c_nvmlGpuInstancePlacement_t(start, 0)
            place.size = placements(info.id, h)[0][1]
            gi = N.nvmlDeviceCreateGpuInstanceWithPlacement(h or gpu, info.id, ctypes.byref(place))
        full = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[info.sliceCount], 0)
        ci = N.nvmlGpuInstanceCreateComputeInstance(gi, full.id)
        return gi, ci

    def placements(profile_id, h=None):
        count = ctypes.c_uint(0)
        N.nvmlDeviceGetGpuInstancePossiblePlacements(h or gpu, profile_id, None, ctypes.byref(count))
        arr = (N.c_nvmlGpuInstancePlacement_t * count.value)()
        N.nvmlDeviceGetGpuInstancePossiblePlacements(h or gpu, profile_id, arr, ctypes.byref(count))
        return [(p.start, p.size) for p in arr]

    def mig_uuids(h=None):
        out = []
        for i in range(N.nvmlDeviceGetMaxMigDeviceCount(h or gpu)):
            try:
                out.append(N.nvmlDeviceGetUUID(N.nvmlDeviceGetMigDeviceHandleByIndex(h or gpu, i)))
            except N.NVMLError_NotFound:
                break
        return out
'''


def nvml(code: str) -> str:
    """The NVML helpers, then a test's code (each dedented on its own)."""
    return textwrap.dedent(NVML) + textwrap.dedent(code)


# (name, memory, index -> (name, MiB, SMs, instance count, placements)) from the real tables.
MODELS = [
    ("NVIDIA A100-SXM4-40GB", "40g", {0: ("MIG 1g.5gb", 4864, 14, 7, [(i, 1) for i in range(7)]),
                                      9: ("MIG 1g.10gb", 9856, 14, 4, [(0, 2), (2, 2), (4, 2), (6, 2)]),
                                      1: ("MIG 2g.10gb", 9856, 28, 3, [(0, 2), (2, 2), (4, 2)]),
                                      2: ("MIG 3g.20gb", 20096, 42, 2, [(0, 4), (4, 4)]),
                                      3: ("MIG 4g.20gb", 20096, 56, 1, [(0, 4)]),
                                      4: ("MIG 7g.40gb", 40448, 98, 1, [(0, 8)])}),
    ("NVIDIA A100-SXM4-80GB", "80g", {0: ("MIG 1g.10gb", 9728, 14, 7, None),
                                      2: ("MIG 3g.40gb", 40192, 42, 2, None),
                                      4: ("MIG 7g.80gb", 81152, 98, 1, None)}),
    ("NVIDIA H100 80GB HBM3", "80g", {0: ("MIG 1g.10gb", 9984, 16, 7, None),
                                      9: ("MIG 1g.20gb", 20096, 26, 4, None),
                                      2: ("MIG 3g.40gb", 40448, 60, 2, None),
                                      4: ("MIG 7g.80gb", 81152, 132, 1, None)}),
    ("NVIDIA H200", "141g", {0: ("MIG 1g.18gb", 18176, 16, 7, None),
                             1: ("MIG 2g.35gb", 36352, 32, 3, None),
                             4: ("MIG 7g.141gb", 143104, 132, 1, None)}),
]


@pytest.mark.parametrize("name, memory, table", MODELS, ids=[m[0] for m in MODELS])
def test_profiles_and_placements_are_the_real_tables(make_sim, name, memory, table):
    sim = make_sim(f"{memory}/132/{name}")
    out, _ = sim.run(nvml(f'''
        for index in {list(table)}:
            info = N.nvmlDeviceGetGpuInstanceProfileInfoV(gpu, index)
            say(index=index, name=info.name, mib=info.memorySizeMB,
                sms=info.multiprocessorCount, count=info.instanceCount,
                placements=placements(info.id))
    '''))
    assert len(out) == len(table)
    for row in out:
        want_name, mib, sms, count, places = table[row["index"]]
        assert (row["name"], row["mib"], row["sms"], row["count"]) == (want_name, mib, sms, count)
        if places:
            assert [tuple(p) for p in row["placements"]] == places


def test_a_gpu_without_mig_says_not_supported(make_sim):
    sim = make_sim("16g/40/Tesla T4")
    out, _ = sim.run(nvml('''
        say(mode=code(N.nvmlDeviceGetMigMode, gpu), info=code(profile, 0))
    '''))
    assert out == [{"mode": "NVML_ERROR_NOT_SUPPORTED", "info": "NVML_ERROR_NOT_SUPPORTED"}]


def test_instances_need_mig_mode_and_take_non_overlapping_placements(make_sim):
    sim = make_sim("40g/108/NVIDIA A100-SXM4-40GB")
    out, _ = sim.run(nvml('''
        say(before=code(make, 0), mode=N.nvmlDeviceGetMigMode(gpu))
        say(status=enable(), mode=N.nvmlDeviceGetMigMode(gpu))
        gi, ci = make(2, start=4)                                # 3g.20gb on slices 4-7
        info = N.nvmlGpuInstanceGetInfo(gi)
        say(placement=[info.placement.start, info.placement.size],
            taken=code(make, 2, 4), overlap=code(make, 3, 0) if False else code(make, 1, 4))
        g1, _ = make(0)                                          # no placement: the highest free
        say(auto=N.nvmlGpuInstanceGetInfo(g1).placement.start,
            left=N.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, profile(0).id),
            seven=code(make, 4), bad=code(N.nvmlDeviceCreateGpuInstanceWithPlacement, gpu,
                                         profile(2).id, ctypes.byref(N.c_nvmlGpuInstancePlacement_t(1, 4))))
        say(mig=len(mig_uuids()), off=code(N.nvmlDeviceSetMigMode, gpu, 0))
    '''))
    assert out[0] == {"before": "NVML_ERROR_NOT_SUPPORTED", "mode": [0, 0]}
    assert out[1] == {"status": 0, "mode": [1, 1]}
    assert out[2] == {"placement": [4, 4], "taken": "NVML_ERROR_INSUFFICIENT_RESOURCES",
                      "overlap": "NVML_ERROR_INSUFFICIENT_RESOURCES"}
    assert out[3] == {"auto": 3, "left": 3, "seven": "NVML_ERROR_INSUFFICIENT_RESOURCES",
                      "bad": "NVML_ERROR_INVALID_ARGUMENT"}
    assert out[4] == {"mig": 2, "off": "NVML_ERROR_IN_USE"}


def test_enabling_mig_while_a_process_holds_the_gpu_stays_pending(make_sim):
    sim = make_sim("40g/108/NVIDIA A100-SXM4-40GB")
    holder = sim.spawn('''
        ctx = context(0)
        say(ready=True)
        sys.stdin.readline()
    ''', stdin=__import__("subprocess").PIPE)
    assert holder.stdout.readline().strip() == '{"ready": true}'
    out, _ = sim.run(nvml('''
        status = enable()
        say(status=status, mode=N.nvmlDeviceGetMigMode(gpu), create=code(make, 0))
    '''))
    assert out == [{"status": 19, "mode": [0, 1], "create": "NVML_ERROR_NOT_SUPPORTED"}]
    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.wait(timeout=10)
    out, _ = sim.run(nvml('''
        say(mode=N.nvmlDeviceGetMigMode(gpu), create=code(make, 0))
    '''))
    assert out == [{"mode": [1, 1], "create": "SUCCESS"}]


def test_destroy_refuses_while_in_use_and_lists_by_id(make_sim):
    sim = make_sim("40g/108/NVIDIA A100-SXM4-40GB")
    out, _ = sim.run(nvml('''
        enable()
        gi, ci = make(1)
        gid = N.nvmlGpuInstanceGetInfo(gi).id
        cid = N.nvmlComputeInstanceGetInfo(ci).id
        same = N.nvmlDeviceGetGpuInstanceById(gpu, gid)
        say(gi_busy=code(N.nvmlGpuInstanceDestroy, gi),
            same=N.nvmlGpuInstanceGetInfo(same).id == gid,
            ci_by_id=N.nvmlComputeInstanceGetInfo(
                N.nvmlGpuInstanceGetComputeInstanceById(gi, cid)).id == cid)
        mig = N.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
        parent = N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        say(uuid=N.nvmlDeviceGetUUID(mig), is_mig=N.nvmlDeviceIsMigDeviceHandle(mig).value,
            gi=N.nvmlDeviceGetGpuInstanceId(mig) == gid, parent=N.nvmlDeviceGetUUID(parent),
            by_uuid=N.nvmlDeviceGetName(N.nvmlDeviceGetHandleByUUID(N.nvmlDeviceGetUUID(mig))),
            mem=N.nvmlDeviceGetMemoryInfo(mig).total >> 20)
        N.nvmlComputeInstanceDestroy(ci)
        say(destroyed=code(N.nvmlGpuInstanceDestroy, gi), stale=code(N.nvmlGpuInstanceGetInfo, gi),
            gone=code(N.nvmlDeviceGetHandleByUUID, N.nvmlDeviceGetUUID(mig)) if False else len(mig_uuids()))
    '''))
    assert out[0] == {"gi_busy": "NVML_ERROR_IN_USE", "same": True, "ci_by_id": True}
    assert out[1]["uuid"].startswith("MIG-") and len(out[1]["uuid"]) == 40
    assert out[1]["is_mig"] == 1 and out[1]["gi"] is True and out[1]["parent"].startswith("GPU-")
    assert out[1]["by_uuid"] == "NVIDIA A100-SXM4-40GB MIG 2g.10gb" and out[1]["mem"] == 9856
    assert out[2] == {"destroyed": "SUCCESS", "stale": "NVML_ERROR_INVALID_ARGUMENT", "gone": 0}


CUDA_VIEW = '''
    ok(cu.cuInit(0))
    n = ok(cu.cuDeviceGetCount())
    dev = ok(cu.cuDeviceGet(0))
    name = ok(cu.cuDeviceGetName(96, dev)).split(b"\\0")[0].decode()
    sms = ok(cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
    ctx = ok(cu.cuCtxCreate(None, 0, dev))
    free, total = ok(cu.cuMemGetInfo())
    grabbed = 0
    while ok_alloc := cu.cuMemAlloc(512 << 20)[0] == cu.CUresult.CUDA_SUCCESS:
        grabbed += 512
    say(count=n, name=name, sms=sms, total=total >> 20, grabbed=grabbed)
    sys.stdin.readline()
'''


def test_cuda_in_an_instance_sees_its_memory_and_sms_and_nothing_else(make_sim):
    """Two 3g.20gb instances: a process in each fills its own 20 GB, neither touches the
    other's memory, and NVML sees each instance's process only in that instance."""
    sim = make_sim("40g/108/NVIDIA A100-SXM4-40GB")
    out, _ = sim.run(nvml('''
        enable()
        make(2, start=0), make(2, start=4)
        say(uuids=mig_uuids())
    '''))
    uuids = out[0]["uuids"]
    procs = []
    for uuid, how in zip(uuids, ("HAMI_SIM_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")):
        env = dict(sim.env, **{how: uuid})
        procs.append(sim.spawn(CUDA_VIEW, env=env, stdin=__import__("subprocess").PIPE))
    seen = [__import__("json").loads(p.stdout.readline()) for p in procs]
    for row in seen:
        assert row["count"] == 1 and row["sms"] == 42 and row["total"] == 20096
        assert row["name"] == "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
        assert row["grabbed"] == 19968  # 39 x 512 MiB in 20096 MiB, in each instance
    out, _ = sim.run(nvml(f'''
        mig = [N.nvmlDeviceGetHandleByUUID(u) for u in {uuids!r}]
        say(pids=[[p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(m)] for m in mig],
            gpu_used=N.nvmlDeviceGetMemoryInfo(gpu).used >> 20,
            mig_used=[N.nvmlDeviceGetMemoryInfo(m).used >> 20 for m in mig],
            busy=code(N.nvmlGpuInstanceDestroy, N.nvmlGpuInstanceGetComputeInstanceById
                      if False else N.nvmlDeviceGetGpuInstanceById(gpu,
                          N.nvmlDeviceGetGpuInstanceId(mig[0]))),
            all_procs=len(N.nvmlDeviceGetComputeRunningProcesses(gpu)))
    '''))
    assert out[0]["pids"] == [[procs[0].pid], [procs[1].pid]]
    assert out[0]["mig_used"] == [19968, 19968] and out[0]["gpu_used"] == 2 * 19968
    assert out[0]["busy"] == "NVML_ERROR_IN_USE" and out[0]["all_procs"] == 2


def test_cuda_on_a_mig_gpu_enumerates_its_instances(make_sim):
    sim = make_sim("40g/108/NVIDIA A100-SXM4-40GB,16g/40/Tesla T4")
    sim.run(nvml('''
        enable()
        make(0), make(1)
    '''))
    out, _ = sim.run('''
        ok(cu.cuInit(0))
        names = [ok(cu.cuDeviceGetName(96, ok(cu.cuDeviceGet(i)))).split(b"\\0")[0].decode()
                 for i in range(ok(cu.cuDeviceGetCount()))]
        say(names=sorted(names))
    ''')
    assert out == [{"names": ["NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                              "NVIDIA A100-SXM4-40GB MIG 2g.10gb", "Tesla T4"]}]
