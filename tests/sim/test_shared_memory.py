"""Memory more than one process holds: VMM memory exported as a file descriptor and cuMemAlloc
memory behind a legacy IPC handle. The data is shared, the memory counted once by NVML's
per-process figures: to its maker while it holds it, then to the importer that keeps it (what
a real driver's count comes to when one holder is left: docs/simgpu.md); it leaves the device
only when the last holder lets go."""
import json
import subprocess
from textwrap import dedent

MiB = 1 << 20

VMM_PROP = dedent('''
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = FD
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = 0
    access = cu.CUmemAccessDesc()
    access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = 0
    access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE

    def mapped(handle, size):
        va = ok(cu.cuMemAddressReserve(size, 0, 0, 0))
        ok(cu.cuMemMap(va, size, 0, handle, 0))
        ok(cu.cuMemSetAccess(va, size, [access], 1))
        return va
''')
FD = "FD = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR\n"

VMM_MAKER = FD + VMM_PROP + dedent('''
    ctx = context(0)
    handle = ok(cu.cuMemCreate(64 * MiB, prop, 0))
    va = mapped(handle, 64 * MiB)
    ok(cu.cuMemcpyHtoD(va, b"made by the maker", 17))
    fd = ok(cu.cuMemExportToShareableHandle(handle, FD, 0))
    say(pid=os.getpid(), where=f"/proc/{os.getpid()}/fd/{fd}")
    sys.stdin.readline()
''')

VMM_IMPORTER = FD + VMM_PROP + dedent('''
    ctx = context(0)
    handle = ok(cu.cuMemImportFromShareableHandle(os.open(sys.argv[1], os.O_RDWR), FD))
    va = mapped(handle, 64 * MiB)
    ok(cu.cuMemRelease(handle))
    back = bytearray(17); ok(cu.cuMemcpyDtoH(back, va, 17))
    say(pid=os.getpid(), data=back.decode())
    sys.stdin.readline()
    ok(cu.cuMemUnmap(va, 64 * MiB))
    say(unmapped=True)
    sys.stdin.readline()
''')

IPC_MAKER = dedent('''
    ctx = context(0)
    ptr = ok(cu.cuMemAlloc(64 * MiB))
    ok(cu.cuMemcpyHtoD(int(ptr) + MiB, b"made by the maker", 17))
    handle = ok(cu.cuIpcGetMemHandle(ptr))
    again = ok(cu.cuIpcGetMemHandle(ptr))
    back = bytearray(17); ok(cu.cuMemcpyDtoH(back, int(ptr) + MiB, 17))
    raw = lambda h: ctypes.string_at(h.getPtr(), 64)
    say(pid=os.getpid(), handle=raw(handle).hex(), same=raw(again) == raw(handle),
        kept=back.decode())
    sys.stdin.readline()
''')

IPC_IMPORTER = dedent('''
    ctx = context(0)
    handle = cu.CUipcMemHandle()
    ctypes.memmove(handle.getPtr(), bytes.fromhex(sys.argv[1]), 64)
    LAZY = cu.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
    bad_flags = error_name(cu.cuIpcOpenMemHandle(handle, 0))
    ptr = ok(cu.cuIpcOpenMemHandle(handle, LAZY))
    twice = ok(cu.cuIpcOpenMemHandle(handle, LAZY))
    back = bytearray(17); ok(cu.cuMemcpyDtoH(back, int(ptr) + MiB, 17))
    say(pid=os.getpid(), data=back.decode(), bad_flags=bad_flags, same=int(twice) == int(ptr),
        free=error_name(cu.cuMemFree(ptr)))
    ok(cu.cuIpcCloseMemHandle(twice))
    sys.stdin.readline()
    ok(cu.cuIpcCloseMemHandle(ptr))
    say(closed=error_name(cu.cuIpcCloseMemHandle(ptr)))
    sys.stdin.readline()
''')

NVML = dedent('''
    import pynvml
    pynvml.nvmlInit()
    dev = pynvml.nvmlDeviceGetHandleByIndex(0)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(dev)
    say(procs={str(p.pid): p.usedGpuMemory for p in procs},
        used=pynvml.nvmlDeviceGetMemoryInfo(dev).used)
''')


def start(sim, code, *args):
    """A child holding the memory until told (a line on stdin); (process, its first line)."""
    proc = sim.spawn("MiB = 1 << 20\n" + code, args=args, stdin=subprocess.PIPE)
    return proc, read_line(proc)


def read_line(proc) -> dict:
    line = proc.stdout.readline()
    assert line, f"the child printed nothing: {proc.stderr.read()}"
    return json.loads(line)


def nvml(sim) -> tuple:
    """({pid: bytes} NVML charges, device bytes used)."""
    out, _ = sim.run(NVML)
    return {int(k): v for k, v in out[0]["procs"].items()}, out[0]["used"]


def follow(sim, maker_code, importer_code, key):
    """Maker, importer; kills the maker; the importer lets go: what NVML said at each step."""
    maker, made = start(sim, maker_code)
    importer, got = start(sim, importer_code, made[key])
    steps = {"both": nvml(sim)}
    maker.kill()
    maker.wait()
    steps["maker gone"] = nvml(sim)
    importer.stdin.write("\n"); importer.stdin.flush()
    steps["released"] = (read_line(importer), nvml(sim))
    return made, got, steps


def test_vmm_memory_kept_by_an_importer_is_charged_to_it_once_its_maker_exits(sim):
    made, got, steps = follow(sim, VMM_MAKER, VMM_IMPORTER, "where")
    assert got["data"] == "made by the maker"
    maker, importer = made["pid"], got["pid"]
    assert steps["both"] == ({maker: 64 * MiB, importer: 0}, 64 * MiB)       # counted once
    assert steps["maker gone"] == ({importer: 64 * MiB}, 64 * MiB)           # still on the device
    assert steps["released"] == ({"unmapped": True}, ({importer: 0}, 0))     # now it is freed


def test_legacy_ipc_memory_is_shared_and_passes_to_the_importer_when_the_maker_exits(sim):
    made, got, steps = follow(sim, IPC_MAKER, IPC_IMPORTER, "handle")
    assert made["same"] and made["kept"] == "made by the maker"  # exporting moved no data
    assert got == {"pid": got["pid"], "data": "made by the maker", "bad_flags":
                   "CUDA_ERROR_INVALID_VALUE", "same": True, "free": "CUDA_ERROR_INVALID_VALUE"}
    maker, importer = made["pid"], got["pid"]
    assert steps["both"] == ({maker: 64 * MiB, importer: 0}, 64 * MiB)
    assert steps["maker gone"] == ({importer: 64 * MiB}, 64 * MiB)
    assert steps["released"] == ({"closed": "CUDA_ERROR_INVALID_VALUE"}, ({importer: 0}, 0))


def test_an_ipc_handle_of_a_process_gone_cannot_be_opened(sim):
    maker, made = start(sim, IPC_MAKER)
    maker.kill()
    maker.wait()
    out, _ = sim.run(f'''
        ctx = context(0)
        handle = cu.CUipcMemHandle()
        ctypes.memmove(handle.getPtr(), bytes.fromhex("{made["handle"]}"), 64)
        say(rc=error_name(cu.cuIpcOpenMemHandle(
            handle, cu.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)), used=used())
    ''')
    assert out == [{"rc": "CUDA_ERROR_INVALID_HANDLE", "used": 0}]


def test_freeing_exported_memory_leaves_it_to_the_importer(sim):
    maker, made = start(sim, IPC_MAKER.replace(
        "sys.stdin.readline()", "sys.stdin.readline(); ok(cu.cuMemFree(ptr)); say(freed=True)"
        "; sys.stdin.readline()"))
    importer, got = start(sim, IPC_IMPORTER, made["handle"])
    maker.stdin.write("\n"); maker.stdin.flush()
    assert read_line(maker) == {"freed": True}
    assert nvml(sim) == ({made["pid"]: 0, got["pid"]: 64 * MiB}, 64 * MiB)


def test_with_several_importers_the_charge_passes_in_the_order_they_took_it(sim):
    maker, made = start(sim, VMM_MAKER)
    first, a = start(sim, VMM_IMPORTER, made["where"])
    second, b = start(sim, VMM_IMPORTER, made["where"])
    seen = []
    for gone in (maker, first):
        gone.kill()
        gone.wait()
        seen.append(nvml(sim))
    assert seen == [({a["pid"]: 64 * MiB, b["pid"]: 0}, 64 * MiB),     # an assumption:
                    ({b["pid"]: 64 * MiB}, 64 * MiB)]                   # docs/simgpu.md
