"""Helpers shared by the shim tests: where things are, what the hook list says, the children's
prelude (a module of its own name: `from conftest import` finds whichever conftest was loaded
last when several test folders run in one session)."""
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LIST = re.compile(r"#define (VGPU_\w+)\(X\)(.*?)(?=\n#define |\n/\*|\Z)", re.S)
_ROW = re.compile(r"\bX\((\w+)")
_TABLE_ROW = re.compile(r"X\((\w+), (\d+), (DEFAULT|PTDS|PTSZ), (\w+), (\w+)\)")

# Prepended to every Python child: cuda-python helpers that report through JSON lines.
PRELUDE = textwrap.dedent('''
    import ctypes, json, os, sys, time
    from cuda.bindings import driver as cu
    MiB = 1 << 20

    def ok(ret):
        err, *rest = ret if isinstance(ret, tuple) else (ret,)
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(repr(err))
        return rest[0] if len(rest) == 1 else (rest or None)

    def name(ret):
        return (ret[0] if isinstance(ret, tuple) else ret).name

    def context(dev=0):
        ok(cu.cuInit(0))
        return ok(cu.cuCtxCreate(None, 0, ok(cu.cuDeviceGet(dev))))

    def used():
        free, total = ok(cu.cuMemGetInfo())
        return total - free

    def say(**kw):
        print(json.dumps(kw), flush=True)
''')


def hooked_symbols():
    """{"cuda": [...], "nvml": [...]}: the symbols the shim hooks, from c/vgpu/hooks.h."""
    text = (ROOT / "c/vgpu/hooks.h").read_text()
    lists = {name: _ROW.findall(body) for name, body in _LIST.findall(text)}
    return {"cuda": lists["VGPU_CUDA_ROUTES"] + lists["VGPU_CUDA_HOOKS"],
            "nvml": lists["VGPU_NVML_HOOKS"]}


def table_symbols():
    """Every exported symbol of the versioned entry-point table."""
    text = (ROOT / "c/include/hami_cuda_procs_table.h").read_text()
    return {row[3] for row in _TABLE_ROW.findall(text)}
