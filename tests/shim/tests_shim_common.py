"""Helpers shared by the shim tests: where things are, and what the hook list says."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LIST = re.compile(r"#define (VGPU_\w+)\(X\)(.*?)(?=\n#define |\n/\*|\Z)", re.S)
_ROW = re.compile(r"\bX\((\w+)")
_TABLE_ROW = re.compile(r"X\((\w+), (\d+), (DEFAULT|PTDS|PTSZ), (\w+), (\w+)\)")


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
