"""The simulated driver's cuGetProcAddress answers from the driver's table of every API of the
real cudaTypedefs.h (c/simgpu/driver_procs_table.h), independently of the shim's own table."""
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"X\((\w+), (\d+), (DEFAULT|PTDS|PTSZ), (\w+), (\w+)\)")


DRIVER_VERSION = 13000  # the simulated driver's default (sim.h)


def table_rows(path="c/simgpu/driver_procs_table.h"):
    """(api, version, flavour, symbol) for every row of a committed table."""
    text = (ROOT / path).read_text()
    return [(a, int(v), f, s) for a, v, f, s, _ in ROW.findall(text)]


LOOKUP = '''
    lib = ctypes.CDLL("libcuda.so.1")
    get = lib.cuGetProcAddress_v2
    get.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                    ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
    def lookup(api, version, flags=0):
        fn, status = ctypes.c_void_p(), ctypes.c_int(-1)
        rc = get(api.encode(), ctypes.byref(fn), version, flags, ctypes.byref(status))
        return rc, fn.value, status.value
    def address(symbol):
        try:
            return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
        except AttributeError:
            return None
    rows = json.loads(sys.stdin.readline())
    results = []
    for api, version, flavour, symbol in rows:
        rc, fn, status = lookup(api, version, 0 if flavour == "DEFAULT" else 2)
        results.append([symbol, rc, fn is not None and fn == address(symbol), address(symbol) is not None])
    say(results=results,
        unknown=lookup("cuNoSuchThing", 13000),
        too_old=lookup("cuMemAllocAsync", 11000)[::2],
        ctx=[lookup("cuCtxCreate", v)[1] == address(s) for v, s in
             ((3020, "cuCtxCreate_v2"), (11040, "cuCtxCreate_v3"), (12050, "cuCtxCreate_v4"))],
        ptds=lookup("cuMemcpyHtoD", 12000, 2)[1] == address("cuMemcpyHtoD_v2_ptds"),
        legacy=lookup("cuMemcpyHtoD", 12000, 1)[1] == address("cuMemcpyHtoD_v2"),
        graph=lookup("cuGraphInstantiate", 12000)[1] == address("cuGraphInstantiateWithFlags"))
'''


def test_every_implemented_row_resolves_to_its_symbol(sim):
    rows = [row for row in table_rows() if row[1] <= DRIVER_VERSION]
    child = sim.spawn(LOOKUP, stdin=subprocess.PIPE)
    out, err = child.communicate(json.dumps(rows) + "\n", timeout=30)
    assert child.returncode == 0, err
    got = json.loads(out)
    implemented = [(sym, rc, same) for sym, rc, same, exported in got["results"] if exported]
    assert len(implemented) > 100
    assert [row for row in implemented if row[1] != 0 or not row[2]] == []
    # Rows the simulator lacks (old 32-bit ABIs, APIs it does not model) are NOT_FOUND,
    # never a wrong function.
    assert all(rc == 500 for _, rc, _, exported in got["results"] if not exported)
    assert got["unknown"] == [500, None, 1]
    assert got["too_old"] == [500, 2]
    assert got["ctx"] == [True, True, True]
    assert got["ptds"] and got["legacy"] and got["graph"]


def test_library_exports_only_table_symbols_and_the_xid_hook():
    table = {row[3] for row in table_rows()}
    lib = ROOT / "hami_sim/lib"
    cuda = subprocess.run(["nm", "-D", "--defined-only", str(lib / "libcuda.so.1")],
                          capture_output=True, text=True, check=True).stdout.split()[2::3]
    nvml = subprocess.run(["nm", "-D", "--defined-only", str(lib / "libnvidia-ml.so.1")],
                          capture_output=True, text=True, check=True).stdout.split()[2::3]
    assert set(cuda) <= table, set(cuda) - table
    assert all(s.startswith("nvml") or s == "hamiSimInjectXid" for s in nvml)
