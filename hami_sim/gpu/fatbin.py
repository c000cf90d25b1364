"""Device code images without a CUDA compiler: minimal cubins (ELF files as nvcc writes them,
with the sections a driver reads to find kernels, their parameters and globals), and the fat
binaries that hold them per SM version, optionally LZ4-compressed. The simulated driver loads
them like any program's embedded code (the kernels are timed, never run), so tests can drive
NVIDIA's CUDA runtime through its registration calls as a compiled program would.

The layouts are the public ones c/simgpu/fatbin.c and cubin.c document.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Dict, List, Sequence

FATBIN_MAGIC = 0xBA55ED50
WRAPPER_MAGIC = 0x466243B1
ENTRY_ELF, ENTRY_PTX = 2, 1
FLAG_64BIT, FLAG_LINUX, FLAG_LZ4 = 0x1, 0x10, 0x2000
STO_CUDA_ENTRY = 0x10
EIFMT_SVAL, EIATTR_KPARAM_INFO = 4, 0x17


@dataclass
class Kernel:
    """An entry point: its (mangled) name, its parameters' sizes in order, registers."""
    name: str
    params: Sequence[int] = (8,)
    regs: int = 32
    shared: int = 0


@dataclass
class Global:
    name: str
    data: bytes


@dataclass
class _Section:
    name: str
    kind: int
    data: bytes = b""
    link: int = 0
    info: int = 0
    entsize: int = 0
    size: int = -1  # NOBITS sections have a size and no data


def _param_info(kernel: Kernel) -> bytes:
    out, offset = b"", 0
    for ordinal, size in enumerate(kernel.params):
        offset = (offset + min(size, 8) - 1) // min(size, 8) * min(size, 8)
        value = struct.pack("<IHHI", 0, ordinal, offset, size << 18)
        out += struct.pack("<BBH", EIFMT_SVAL, EIATTR_KPARAM_INFO, len(value)) + value
        offset += size
    return out


def cubin(kernels: Sequence[Kernel], globals_: Sequence[Global] = ()) -> bytes:
    """A minimal 64-bit cubin holding `kernels` and initialised `globals_`."""
    sections: List[_Section] = [_Section("", 0)]
    symbols: List[tuple] = []  # name, info, other, shndx, size[, value]
    for k in kernels:
        text = len(sections)
        sections.append(_Section(f".text.{k.name}", 1, b"\0" * 16, info=k.regs << 24))
        sections.append(_Section(f".nv.info.{k.name}", 0x70000000, _param_info(k), info=text))
        sections.append(_Section(f".nv.constant0.{k.name}", 1,
                                 b"\0" * (0x160 + sum(k.params)), info=text))
        if k.shared:
            sections.append(_Section(f".nv.shared.{k.name}", 8, size=k.shared, info=text))
        symbols.append((k.name, 0x12, STO_CUDA_ENTRY, text, 16))  # GLOBAL FUNC
    if globals_:
        data = b"".join(g.data for g in globals_)
        index = len(sections)
        sections.append(_Section(".nv.constant3", 1, data))
        offset = 0
        for g in globals_:
            symbols.append((g.name, 0x11, 0, index, len(g.data), offset))  # GLOBAL OBJECT
            offset += len(g.data)
    strtab = b"\0"
    names: Dict[str, int] = {}
    for sym in symbols:
        names[sym[0]] = len(strtab)
        strtab += sym[0].encode() + b"\0"
    symtab = b"\0" * 24
    for sym in symbols:
        name, info, other, shndx, size = sym[:5]
        value = sym[5] if len(sym) > 5 else 0
        symtab += struct.pack("<IBBHQQ", names[name], info, other, shndx, value, size)
    strtab_index = len(sections)
    sections.append(_Section(".strtab", 3, strtab))
    sections.append(_Section(".symtab", 2, symtab, link=strtab_index, entsize=24, info=1))
    return _elf(sections)


def _elf(sections: List[_Section]) -> bytes:
    shstrtab = b"\0"
    offsets = []
    for s in sections[1:]:
        offsets.append(len(shstrtab))
        shstrtab += s.name.encode() + b"\0"
    offsets.append(len(shstrtab))
    shstrtab += b".shstrtab\0"
    sections = sections + [_Section(".shstrtab", 3, shstrtab)]
    body, placed = b"", []
    for s in sections:
        start = 64 + len(body)
        placed.append(start)
        body += s.data
        body += b"\0" * (-len(body) % 8)
    shoff = 64 + len(body)
    header = struct.pack("<4sBBBBB7sHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0x41, 8, b"\0" * 7,
                         2, 190, 1, 0, 0, shoff, 0x500050, 64, 0, 0, 64, len(sections),
                         len(sections) - 1)
    table = b""
    for i, (s, start) in enumerate(zip(sections, placed)):
        name = 0 if i == 0 else offsets[i - 1]
        size = s.size if s.size >= 0 else len(s.data)
        table += struct.pack("<IIQQQQIIQQ", name, s.kind, 0, 0, start if s.kind else 0, size,
                             s.link, s.info, 8 if s.kind else 0, s.entsize)
    return header + body + table


def lz4_compress(data: bytes) -> bytes:
    """An LZ4 block (greedy matching over 4-byte hashes): what nvcc's default compression
    produces in kind, so the driver's decompressor is exercised on real matches."""
    out, table, anchor, i = bytearray(), {}, 0, 0
    while i + 12 <= len(data):
        key = data[i:i + 4]
        cand = table.get(key)
        table[key] = i
        if cand is None or i - cand > 0xFFFF:
            i += 1
            continue
        n = 4
        while i + n < len(data) - 5 and data[cand + n] == data[i + n]:
            n += 1
        _sequence(out, data[anchor:i], i - cand, n)
        i += n
        anchor = i
    _sequence(out, data[anchor:], None, 0)
    return bytes(out)


def _length(out: bytearray, n: int) -> None:
    while n >= 255:
        out.append(255)
        n -= 255
    out.append(n)


def _sequence(out: bytearray, literals: bytes, offset, match: int) -> None:
    lit, mat = len(literals), match - 4 if offset else 0
    out.append((min(lit, 15) << 4) | (min(mat, 15) if offset else 0))
    if lit >= 15:
        _length(out, lit - 15)
    out += literals
    if offset:
        out += struct.pack("<H", offset)
        if mat >= 15:
            _length(out, mat - 15)


@dataclass
class Image:
    """One entry of a fat binary: code for one SM version."""
    sm: int
    code: bytes
    kind: int = ENTRY_ELF
    lz4: bool = False


def fatbin(images: Sequence[Image]) -> bytes:
    """A fat binary holding `images` (header, then one entry per image)."""
    entries = b""
    for img in images:
        payload = lz4_compress(img.code) if img.lz4 else img.code
        padded = payload + b"\0" * (-len(payload) % 8)
        flags = FLAG_64BIT | FLAG_LINUX | (FLAG_LZ4 if img.lz4 else 0)
        entries += struct.pack("<HHIQIIIIIIQQQ", img.kind, 0x101, 64, len(padded), len(payload),
                               0, 0x10008, img.sm, 64, 0, flags, 0,
                               len(img.code) if img.lz4 else 0) + padded
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(entries)) + entries
