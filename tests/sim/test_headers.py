"""Header conformance: our CUDA / NVML declarations equal the real headers where installed.

A generated C file includes the real header first, then ours in conformance mode, and turns
every difference into a compile error: constants via _Static_assert, struct layouts via
sizeof/_Alignof/offsetof of every member, prototypes by re-declaration (a conflicting type
does not compile), and each row of the versioned entry-point table against its
`PFN_<api>_v<version>` typedef in cudaTypedefs.h.
"""
import glob
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "c/include"


def real_cuda_include() -> Path:
    """Where the real cuda.h and cudaTypedefs.h are: the nvidia-cuda-runtime wheel (a test
    extra, so `make test` installs it), else a CUDA toolkit in /usr/local/cuda."""
    for prefix in {sys.prefix, sys.base_prefix}:
        for path in sorted(glob.glob(f"{prefix}/lib/python3*/site-packages/nvidia/**/include/"
                                     "cudaTypedefs.h", recursive=True)):
            return Path(path).parent
    return Path("/usr/local/cuda/include")


CUDA_INCLUDE = real_cuda_include()
MISSING = "the real CUDA headers are missing: `make test` installs them (nvidia-cuda-runtime)"
STRUCT = re.compile(r"typedef (?:struct|union) HAMI_N?T\((\w+)\) \{")
PROTO = re.compile(r"^(?:CUresult|nvmlReturn_t|const char \*)\s*(\w+)\(", re.M)
ROW = re.compile(r"X\((\w+), (\d+), (DEFAULT|PTDS|PTSZ), (\w+), (\w+)\)")


def struct_fields(header: Path):
    """{typedef name: [member names]} for the structs of one of our headers."""
    text = header.read_text()
    out = {}
    for m in STRUCT.finditer(text):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[m.end():i - 1]
        while re.search(r"\{[^{}]*\}", body):  # drop nested struct / union bodies
            body = re.sub(r"\{[^{}]*\}", "", body)
        name = re.match(r"\s*HAMI_N?T\((\w+)\)", text[i:]).group(1)
        members = [re.sub(r"\[.*\]", "", s).split()[-1].lstrip("*")
                   for s in body.split(";") if s.strip()]
        out[name] = members
    return out


def layout_checks(header: Path) -> str:
    lines = []
    for name, members in struct_fields(header).items():
        ours = f"hami_check_{name}"
        lines.append(f'_Static_assert(sizeof({name}) == sizeof({ours}), "{name}: size");')
        lines.append(f'_Static_assert(_Alignof({name}) == _Alignof({ours}), "{name}: align");')
        lines += [f'_Static_assert(offsetof({name}, {f}) == offsetof({ours}, {f}), '
                  f'"{name}.{f}: offset");' for f in members]
    return "\n".join(lines)


def compile_check(source: str, tmp_path: Path, include_dirs):
    path = tmp_path / "conformance.c"
    path.write_text(source)
    flags = [f"-I{d}" for d in include_dirs]
    result = subprocess.run(["cc", "-std=gnu11", "-fsyntax-only", "-Werror", *flags, str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[:4000]


CONSTANT_CHECKS = '''
#define HAMI_SAME(name, value, ...) _Static_assert((long long)(name) == (long long)(value), #name);
#define HAMI_SAME_PTR(name, value) _Static_assert((long long)(uintptr_t)(name) == (value), #name);
'''


def test_cuda_declarations_match_the_real_cuda_h(tmp_path):
    assert (CUDA_INCLUDE / "cuda.h").is_file(), MISSING
    api = INCLUDE / "hami_cuda_api.h"
    declared = set(PROTO.findall(api.read_text()))
    rows = ROW.findall((INCLUDE / "hami_cuda_procs_table.h").read_text())
    assert len(declared) > 100 and len(rows) > 150
    has_typedefs = (CUDA_INCLUDE / "cudaTypedefs.h").is_file()
    parts = ["#include <stdint.h>", "#include <stddef.h>",
             "#define __CUDA_API_VERSION_INTERNAL 1", "#include <cuda.h>",
             "#include <cudaTypedefs.h>" if has_typedefs else "",
             "#define HAMI_CUDA_CONFORMANCE 1", '#include "hami_cuda.h"', CONSTANT_CHECKS,
             "#define HAMI_APPLY(list) list(HAMI_SAME)", "HAMI_CU_CONST_LISTS(HAMI_APPLY)",
             "HAMI_CU_MACRO_VALUES(HAMI_SAME_PTR)", layout_checks(INCLUDE / "hami_cuda.h")]
    parts += [f"#undef {name}" for name in sorted(declared | {r[0] for r in rows})]
    parts.append('#include "hami_cuda_api.h"')
    for api_name, version, flavour, symbol, pfn in rows if has_typedefs else []:
        if symbol in declared:
            parts.append(f"_Static_assert(__builtin_types_compatible_p(__typeof__(&{symbol}), "
                         f'{pfn}), "{api_name}@{version} {flavour}: {symbol} is not {pfn}");')
        else:
            parts.append(f'_Static_assert(sizeof({pfn}) == sizeof(void *), "{pfn}");')
    compile_check("\n".join(parts) + "\n", tmp_path, [CUDA_INCLUDE, INCLUDE])


def real_nvml_include():
    """Where nvidia-nvml-dev put nvml.h in this environment, or None."""
    prefixes = {sys.prefix, sys.base_prefix}
    for prefix in prefixes:
        for path in glob.glob(f"{prefix}/lib/python3*/site-packages/nvidia/**/include/nvml.h",
                              recursive=True):
            return Path(path).parent
    return None


@pytest.mark.skipif(real_nvml_include() is None, reason="no real nvml.h (nvidia-nvml-dev) here")
def test_nvml_declarations_match_the_real_nvml_h(tmp_path):
    source = "\n".join([
        "#include <stdint.h>", "#include <stddef.h>", "#define NVML_NO_UNVERSIONED_FUNC_DEFS 1",
        "#include <nvml.h>", "#define HAMI_NVML_CONFORMANCE 1", CONSTANT_CHECKS,
        '#include "hami_nvml.h"',  # re-declares every prototype after the real ones
        "HAMI_NVML_RETURNS(HAMI_SAME)", "HAMI_NVML_MACRO_VALUES(HAMI_SAME)",
        layout_checks(INCLUDE / "hami_nvml.h")])
    compile_check(source + "\n", tmp_path, [real_nvml_include(), INCLUDE])


def test_the_checks_catch_a_wrong_constant(tmp_path):
    """The mechanism itself: a deliberately wrong value must not compile."""
    source = CONSTANT_CHECKS + "enum { REAL = 2 };\n#define LIST(X) X(REAL, 3)\nLIST(HAMI_SAME)\n"
    with pytest.raises(AssertionError, match="REAL"):
        compile_check(source, tmp_path, [])


def test_committed_entry_point_table_is_what_the_generator_makes():
    assert (CUDA_INCLUDE / "cudaTypedefs.h").is_file(), MISSING
    generated = subprocess.run([sys.executable, str(ROOT / "c/tools/gen_cuda_procs.py"),
                                str(CUDA_INCLUDE / "cudaTypedefs.h")],
                               capture_output=True, text=True, check=True, timeout=60).stdout
    assert generated == (INCLUDE / "hami_cuda_procs_table.h").read_text()
