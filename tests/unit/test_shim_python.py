"""The shim's Python side without processes: settings <-> environment, sizes, the usage reader
on a synthetic file, hami-run's argument checks and limits, hami-smi's table."""
import ctypes

import pytest

from hami_node.shim import (CacheFileError, ShimConfigError, ShimSettings, layout, read_usage,
                            shim_env)
from hami_node.shim.probe import DeviceProbe, DriverProbe
from hami_node.shim.run import parse_args, settings_for
from hami_node.shim.settings import default_cache_path
from hami_node.shim.sizes import env_size, human_size
from hami_node.shim.smi import render
from hami_node.shim.usage import ProcessTable, ProcFs

G, M = 1 << 30, 1 << 20


def test_settings_round_trip_through_the_environment():
    s = ShimSettings(memory_limit=3000 * M, device_memory_limits={1: 512 * M + 1}, sm_limit=30,
                     device_sm_limits={2: 50}, cache_path="/run/c/vgpu.cache", policy="force",
                     priority=1, log_level=2, context_overhead=300 * M)
    env = s.to_env()
    assert env == {"CUDA_DEVICE_MEMORY_LIMIT": "3000m", "CUDA_DEVICE_MEMORY_LIMIT_1": "536870913",
                   "CUDA_DEVICE_SM_LIMIT": "30", "CUDA_DEVICE_SM_LIMIT_2": "50",
                   "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/run/c/vgpu.cache",
                   "GPU_CORE_UTILIZATION_POLICY": "force", "CUDA_TASK_PRIORITY": "1",
                   "LIBCUDA_LOG_LEVEL": "2", "HAMI_VGPU_CONTEXT_OVERHEAD": "300m"}
    assert ShimSettings.from_env(env) == s
    assert (s.limit_for(0), s.limit_for(1)) == (3000 * M, 512 * M + 1)


@pytest.mark.parametrize("env, names", [
    ({"CUDA_DEVICE_MEMORY_LIMIT": "1gb"}, "CUDA_DEVICE_MEMORY_LIMIT='1gb'"),
    ({"CUDA_DEVICE_MEMORY_LIMIT_3": "x"}, "CUDA_DEVICE_MEMORY_LIMIT_3='x'"),
    ({"CUDA_DEVICE_SM_LIMIT_99": "10"}, "CUDA_DEVICE_SM_LIMIT_99='10'"),
    ({"CUDA_DEVICE_SM_LIMIT": "10%"}, "CUDA_DEVICE_SM_LIMIT='10%'"),
    ({"GPU_CORE_UTILIZATION_POLICY": "off"}, "GPU_CORE_UTILIZATION_POLICY='off'"),
    ({"LIBCUDA_LOG_LEVEL": "5"}, "LIBCUDA_LOG_LEVEL='5'"),
], ids=["size", "indexed-size", "index", "percent", "policy", "log-level"])
def test_bad_variables_are_named(env, names):
    with pytest.raises(ShimConfigError) as e:
        ShimSettings.from_env(env)
    assert names in str(e.value)


def test_sizes_for_the_environment_and_for_people():
    assert [env_size(v) for v in (0, M, 3000 * M, M + 1)] == ["0", "1m", "3000m", "1048577"]
    assert [human_size(v) for v in (512, 1536, 300 * M, 3 * G // 2)] == [
        "512 B", "1.5 KiB", "300.0 MiB", "1.5 GiB"]


def test_shim_env_puts_the_shim_first_once(tmp_path):
    lib = tmp_path / "libvgpu.so"
    env = shim_env(ShimSettings(memory_limit=G), base={"LD_PRELOAD": f"/x.so {lib}"}, lib=lib)
    assert env["LD_PRELOAD"] == f"{lib}:/x.so" and env["CUDA_DEVICE_MEMORY_LIMIT"] == "1024m"
    assert default_cache_path({"TMPDIR": "/scratch"}).parent.name.startswith("hami-vgpu-")


class FakeProbe:
    """DeviceProbe with fixed device sizes and context costs."""

    def __init__(self, totals, costs=()):
        self.totals_, self.costs, self.asked = totals, list(costs), None

    def totals(self, env):
        self.asked = env
        return self.totals_

    def context_costs(self, env):
        return self.costs


def test_boundary_implementations_satisfy_their_protocols():
    assert isinstance(DriverProbe(), DeviceProbe) and isinstance(FakeProbe([]), DeviceProbe)
    assert isinstance(ProcFs(), ProcessTable) and isinstance(Procs({}), ProcessTable)


def test_percent_limits_follow_each_device_and_round_to_mib(tmp_path):
    args = parse_args(["--gpu-mem-percent", "30", "--gpu-cores", "20", "--", "app"])
    probe = FakeProbe([40 * G, 15 * G + 12345])
    s = settings_for(args, {"X": "1"}, tmp_path / "c", probe)
    assert s.device_memory_limits == {0: 12288 * M, 1: 4608 * M} and s.sm_limit == 20
    assert probe.asked == {"X": "1"} and s.cache_path == str(tmp_path / "c")


@pytest.mark.parametrize("argv, costs, says", [
    (["--gpu-mem", "1024", "--", "x"], [430 * M], "did you mean --gpu-mem 1024m"),
    (["--gpu-mem", "300m", "--", "x"], [430 * M, 300 * M], "device 0: a limit of 300 MiB is less "
     "than the 430 MiB a CUDA context takes"),
    (["--gpu-mem-percent", "0.5", "--", "x"], [None, 430 * M], "device 1: a limit of 76 MiB"),
])
def test_hami_run_refuses_a_cap_below_a_context(tmp_path, argv, costs, says):
    args = parse_args(argv)
    with pytest.raises(ShimConfigError, match=says):
        settings_for(args, {}, tmp_path / "c", FakeProbe([40 * G, 15 * G], costs))


def test_hami_run_asks_no_driver_for_caps_that_hold_a_context(tmp_path):
    probe = FakeProbe([40 * G], costs=[10 * G])  # never consulted: 4 GiB needs no check
    s = settings_for(parse_args(["--gpu-mem", "4g", "--", "x"]), {}, tmp_path / "c", probe)
    assert s.memory_limit == 4 * G


@pytest.mark.parametrize("argv, says", [
    (["--", ], "give the command"), (["--gpu-mem", "4gb", "--", "x"], "is not a size"),
    (["--gpu-mem-percent", "101", "--", "x"], "at most 100"),
    (["--gpu-cores", "-1", "--", "x"], "from 0 to 100"), (["--devices", ",", "--", "x"], "GPU"),
])
def test_hami_run_rejects_what_makes_no_sense(argv, says):
    with pytest.raises(ShimConfigError, match=says):
        parse_args(argv)


class Procs:
    """ProcessTable over a dict pid -> start time."""

    def __init__(self, table):
        self.table = table

    def start_time(self, pid):
        return self.table.get(pid)


def synthetic_file(path, version=layout.VERSION):
    s = layout.VgpuShared()
    s.header.magic, s.header.version = layout.MAGIC, version
    dev = s.devices[0]
    dev.uuid, dev.total_bytes, dev.limit_bytes, dev.used_bytes = b"GPU-a", 40 * G, 4 * G, 3 * G
    dev.peak_bytes, dev.sm_limit = 3 * G, 30
    for slot, (pid, start, used) in enumerate([(10, 111, G), (11, 222, 2 * G)]):
        s.procs[slot].pid, s.procs[slot].start_time = pid, start
        s.procs[slot].used[0] = used
    path.write_bytes(bytes(s))
    assert ctypes.sizeof(s) == layout.FILE_SIZE


def test_the_reader_counts_live_processes_only(tmp_path):
    path = tmp_path / "c"
    synthetic_file(path)
    snap = read_usage(path, Procs({10: 111, 11: 999}))  # pid 11 was reused by another process
    dev = snap.devices[0]
    assert (dev.uuid, dev.limit, dev.used, dev.counted, dev.sm_limit) == ("GPU-a", 4 * G, G,
                                                                         3 * G, 30)
    assert [(p.pid, p.used) for p in snap.processes] == [(10, {0: G})] and snap.dead_slots == 1
    assert snap.device("GPU-a") is dev and snap.device("GPU-b") is None
    text = render(snap)
    assert "1.0 GiB" in text and "      10    0     1.0 GiB" in text


def test_the_reader_refuses_other_files_clearly(tmp_path):
    path = tmp_path / "c"
    synthetic_file(path, version=2)
    with pytest.raises(CacheFileError, match="version 2"):
        read_usage(path, Procs({}))
    path.write_bytes(b"x")
    with pytest.raises(CacheFileError, match="has size 1"):
        read_usage(path, Procs({}))
    with pytest.raises(CacheFileError, match="no such shared accounting file"):
        read_usage(tmp_path / "missing", Procs({}))


def test_proc_fs_reads_start_times_and_sees_zombies_and_gone_processes(tmp_path):
    fields = " ".join(str(n) for n in range(4, 22))  # fields 4..21, then the start time
    for pid, state, start in ((10, "S", 111), (11, "Z", 222)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (a) b) {state} {fields} {start} 0 0\n")
    procs = ProcFs(tmp_path)
    assert procs.start_time(10) == 111 and procs.start_time(11) is None
    assert procs.start_time(99999999) is None  # no /proc entry and no such process


def test_a_process_whose_start_time_cannot_be_read_counts_as_alive(tmp_path):
    path = tmp_path / "c"
    synthetic_file(path)
    snap = read_usage(path, Procs({10: 0, 11: 222}))
    assert [p.pid for p in snap.processes] == [10, 11] and snap.devices[0].used == 3 * G
