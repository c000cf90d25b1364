"""Checks a ctypes mirror of shared memory against the C header that defines it: a probe
compiled against the header prints every struct's size and field offsets (and any constants
asked for), to be compared with what ctypes computes. Used by the layout tests of every
shared-memory format (the simulator's state file, the shim's accounting file)."""
import ctypes
import subprocess
from pathlib import Path
from typing import Iterable, List, Mapping, Sequence, Tuple


def compare_layout(mirrors: Mapping[type, str], header: str, include_dirs: Iterable[Path],
                   workdir: Path, constants: Sequence[str] = ()) -> Tuple[List[int], List[int]]:
    """(numbers from C, numbers from Python): for each mirror its sizeof, then the offset of
    each of its fields, then each constant (Python side: None, to be checked by the caller)."""
    lines, expected = [], []
    for struct, c_name in mirrors.items():
        lines.append(f'printf("%zu\\n", sizeof(struct {c_name}));')
        expected.append(ctypes.sizeof(struct))
        for name, *_ in struct._fields_:
            lines.append(f'printf("%zu\\n", offsetof(struct {c_name}, {name}));')
            expected.append(getattr(struct, name).offset)
    lines += [f'printf("%llu\\n", (unsigned long long)({c}));' for c in constants]
    probe = Path(workdir) / "layout_probe.c"
    probe.write_text(f'#include <stddef.h>\n#include <stdio.h>\n#include "{header}"\n'
                     "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = probe.with_suffix("")
    subprocess.run(["cc", "-std=gnu11", "-Wall", "-Werror",
                    *[f"-I{d}" for d in include_dirs], str(probe), "-o", str(exe)],
                   check=True, timeout=60)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return [int(v) for v in out.split()], expected
