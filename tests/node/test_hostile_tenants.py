"""Hostile tenants: a container's process trying to take more than the 256 MiB and 30 % of a
GPU it was given, each way the README's trust section names. Each is either stopped by the shim
(the test shows the refusal, and that the outside checks stay quiet) or caught from outside by
hami-node within a bound of its check period (the test shows the Events and metrics), for memory
and for compute. The processes are real, on the simulated GPU, in real cgroups as kubelet lays
them out (tenants.py)."""
import ctypes
import struct
import time

import pytest

from hami_node.shim import layout
from tenants import CAP_MIB, PERIOD_S, Tenant, read_json

OOM = 2                       # CUDA_ERROR_OUT_OF_MEMORY
# Memory: over at the first check after the allocation (one period). Compute: the mean of a
# window over the threshold, under two periods (hami_node/plugin/overshare.py). Slack for a
# loaded machine; a check that does not work never gets there.
CAUGHT_WITHIN_S = 2 * PERIOD_S + 1 + 8
MEMORY, COMPUTE = "GPUMemoryOverCap", "GPUComputeOverShare"


def caught(hostile, pod: str, started: float) -> dict:
    """Waits for both Events of the pod; the seconds each took from `started`."""
    took = {}
    for reason in (MEMORY, COMPUTE):
        hostile.wait_event(pod, reason, timeout=CAUGHT_WITHIN_S + 10)
        took[reason] = time.monotonic() - started
    assert all(t < CAUGHT_WITHIN_S for t in took.values()), took
    assert hostile.over("hami_container_memory_over_cap_bytes").get(pod, 0) > 0
    assert hostile.over("hami_container_compute_over_share_percent").get(pod, 0) > 0
    print(f"{pod}: caught after " + ", ".join(f"{r} {t:.1f} s" for r, t in took.items()))
    return took


def quiet(hostile, pod: str) -> None:
    """Two more check periods: neither outside check says anything about the pod."""
    time.sleep(2 * PERIOD_S + 0.5)
    assert hostile.events(pod, MEMORY) == [] and hostile.events(pod, COMPUTE) == []


@pytest.fixture
def tenant(hostile, request):
    made = Tenant(hostile, request.node.name[len("test_"):].replace("_", "-")[:40].strip("-"))
    yield made
    made.stop()


def without(env: dict, *names) -> dict:
    return {k: v for k, v in env.items() if k not in names}


def test_exec_without_the_preload_is_caught(hostile, tenant):
    started = time.monotonic()
    _, out = tenant.run_tenant("plain", 512, 60, prefix=("env", "-u", "LD_PRELOAD"))
    assert out["held_mib"] == 512                      # nothing stopped it: no shim
    caught(hostile, tenant.name, started)


def test_a_process_in_its_own_pid_namespace_is_mapped_by_its_host_pid_and_caught(hostile,
                                                                                   tenant):
    # A container without hostPID: its own PID namespace and /proc. The driver names the
    # process to hami-node (in the host's namespace) by its host PID, whose cgroup is the pod's.
    started = time.monotonic()
    proc, out = tenant.run_tenant("plain", 512, 60, prefix=(
        "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "env", "-u", "LD_PRELOAD"))
    assert out["held_mib"] == 512 and out["pid"] != proc.pid   # PID 1 of its own namespace
    caught(hostile, tenant.name, started)
    (event,) = hostile.events(tenant.name, MEMORY)
    host_pids = [int(p) for p in (tenant.cgroup / "cgroup.procs").read_text().split()]
    assert any(str(p) in event.message for p in host_pids if p != proc.pid), event.message


def test_ld_so_preload_emptied_by_root_in_its_mount_namespace_is_caught(hostile, tenant,
                                                                        tmp_path):
    # The container: its own mount namespace whose /etc/ld.so.preload lists the shim (an
    # overlay on /etc, so the host's is untouched). Inside, root empties the file in a mount
    # namespace of its own and runs the tenant.
    shim = tenant.env["LD_PRELOAD"].split(":")[0]
    (tmp_path / "up").mkdir()
    (tmp_path / "work").mkdir()
    inner = f"mount --bind /dev/null /etc/ld.so.preload && exec {hostile.tenant} plain 512 60"
    script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={tmp_path}/up,"
              f"workdir={tmp_path}/work /etc && echo {shim} > /etc/ld.so.preload && "
              f"grep -q libvgpu /proc/self/maps && echo '{{\"preloaded\": true}}' && "
              f"exec unshare -m sh -c '{inner}'")
    started = time.monotonic()
    proc = tenant.start(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                        env=without(tenant.env, "LD_PRELOAD"))
    assert read_json(proc) == {"preloaded": True}       # the container's processes get the shim
    out = read_json(proc)
    assert out["held_mib"] == 512
    assert "libvgpu" not in open(f"/proc/{out['pid']}/maps").read()
    caught(hostile, tenant.name, started)


def test_the_drivers_own_dlsym_found_past_the_shims_is_caught(hostile, tenant):
    # The shim substitutes its hooks where a program asks dlsym for them; libc's dlsym, found
    # with dlvsym, is not asked. (A statically linked program or one issuing the driver's
    # ioctls itself is the same to the driver: a process without the shim.)
    started = time.monotonic()
    _, out = tenant.run_tenant("realdlsym", 512, 60)
    assert out["held_mib"] == 512
    caught(hostile, tenant.name, started)


def test_dlopen_of_the_driver_with_rtld_deepbind_is_stopped(hostile, tenant):
    _, out = tenant.run_tenant("deepbind", 512, 60)
    assert (out["held_mib"], out["error"]) == (CAP_MIB, OOM)
    quiet(hostile, tenant.name)


def test_many_processes_share_one_cap_and_one_share(hostile, tenant):
    outs = [tenant.run_tenant("plain", 128, 60)[1] for _ in range(4)]
    assert sum(o["held_mib"] for o in outs) == CAP_MIB
    assert [o["error"] for o in outs].count(OOM) >= 2
    quiet(hostile, tenant.name)


def test_many_processes_without_the_shim_are_summed_and_caught(hostile, tenant):
    started = time.monotonic()
    outs = [tenant.run_tenant("plain", 128, 60, prefix=("env", "-u", "LD_PRELOAD"))[1]
            for _ in range(3)]
    assert [o["held_mib"] for o in outs] == [128] * 3   # each under the cap, 384 MiB together
    caught(hostile, tenant.name, started)
    (event,) = hostile.events(tenant.name, MEMORY)
    assert all(str(o["pid"]) in event.message for o in outs)


def rewrite_limits(path) -> None:
    """What a tenant can do to the accounting file mounted writable in its container: no
    memory limit, no compute limit, on every device record."""
    base, size = layout.VgpuShared.devices.offset, ctypes.sizeof(layout.VgpuDevice)
    with open(path, "r+b") as f:
        for i in range(layout.MAX_DEVICES):
            f.seek(base + i * size)
            if f.read(1) != b"\0":                     # a record in use (its UUID)
                f.seek(base + i * size + layout.VgpuDevice.limit_bytes.offset)
                f.write(struct.pack("<Q", 0))
                f.seek(base + i * size + layout.VgpuDevice.sm_limit.offset)
                f.write(struct.pack("<I", 100))


def test_writes_into_the_shared_accounting_file_are_caught(hostile, tenant):
    first, out = tenant.run_tenant("plain", 64, 0)      # registers the GPU's record
    assert out["error"] == 0
    rewrite_limits(tenant.shared_file)
    started = time.monotonic()
    _, out = tenant.run_tenant("plain", 512, 60)
    assert out["held_mib"] == 512                      # the shim believed the file
    caught(hostile, tenant.name, started)


def kept_after_its_maker_exits(hostile, tenant, export: str, handle_of) -> None:
    """Memory a neighbour made (counted to it by its shim and by the driver) and passed to the
    tenant, which keeps it after the neighbour's process exits. While the neighbour holds it,
    it is the neighbour's, and no one is over; once the neighbour is gone the driver charges
    the process keeping it, so the tenant's container is over its cap and caught."""
    neighbour = Tenant(hostile, f"{export}-neighbour")
    try:
        exporter, out = neighbour.run_tenant(export, 192, 0)
        assert out["error"] == 0
        importer, got = tenant.run_tenant(export.replace("export", "import"), 192, 0,
                                          handle_of(out))
        assert got["error"] == 0
        _, own = tenant.run_tenant("plain", 512, 0)
        assert own["held_mib"] == CAP_MIB              # its own allocations are still capped
        time.sleep(PERIOD_S + 0.5)                     # a check: the neighbour's, and in its cap
        assert hostile.events(tenant.name, MEMORY) == []
        started = time.monotonic()
        exporter.kill()
        exporter.wait()
        event, _ = hostile.wait_event(tenant.name, MEMORY, timeout=CAUGHT_WITHIN_S + 10)
        took = time.monotonic() - started
        assert took < CAUGHT_WITHIN_S, took
        assert str(got["pid"]) in event.message        # the process keeping it is named
        assert hostile.over("hami_container_memory_over_cap_bytes").get(tenant.name, 0) > 0
        print(f"{tenant.name}: caught {took:.1f} s after the maker exited")
        _, again = neighbour.run_tenant("plain", 512, 0)
        assert again["held_mib"] == CAP_MIB            # the neighbour's cap is free again
        assert importer.poll() is None                 # and the tenant still holds 192 MiB
        assert hostile.events(neighbour.name, MEMORY) == []
    finally:
        neighbour.stop()


def test_vmm_memory_of_a_neighbour_kept_after_it_exits_is_caught(hostile, tenant):
    kept_after_its_maker_exits(hostile, tenant, "vmm-export",
                               lambda out: f"/proc/{out['pid']}/fd/{out['fd']}")


def test_legacy_ipc_memory_of_a_neighbour_kept_after_it_exits_is_caught(hostile, tenant):
    kept_after_its_maker_exits(hostile, tenant, "ipc-export", lambda out: out["handle"])
