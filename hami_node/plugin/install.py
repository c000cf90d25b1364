"""`hami-node install-shim`: put libvgpu.so and the preload file into the host directory.

Atomic and safe for running containers: the library is written to a new versioned file
(`libvgpu-<sha256 prefix>.so`, same content -> same name) and then the stable name
`libvgpu.so` is switched to it by renaming a symlink over it. A container bind-mounts (and its
processes map) the file the name pointed to when it started, so replacing the name never
touches a library in use; old versions are kept for that reason. The preload file is replaced
the same way (write a temporary file, rename).
"""
import hashlib
import os
from pathlib import Path
from typing import Optional

from hami_node.plugin.errors import ShimInstallError
from hami_node.plugin.layout import CONTAINER_LIB, HostLayout


def packaged_shim() -> Path:
    """The libvgpu.so built into this package (hami_node/shim/lib)."""
    return Path(__file__).resolve().parent.parent / "shim" / "lib" / "libvgpu.so"


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Writes a file whole or not at all: a temporary file, fsynced, renamed over path."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def install_shim(layout: HostLayout, source: Optional[Path] = None) -> Path:
    """Installs the shim and the preload file; returns the versioned library's path."""
    source = Path(source) if source else packaged_shim()
    try:
        data = source.read_bytes()
    except OSError as e:
        raise ShimInstallError(f"cannot read the shim library {source}: {e.strerror}; build it "
                               "with `make -C c` or give --source") from e
    if not data.startswith(b"\x7fELF"):
        raise ShimInstallError(f"{source} is not a shared library (no ELF header)")
    try:
        layout.root.mkdir(parents=True, exist_ok=True)
        layout.containers.mkdir(exist_ok=True)
        os.chmod(layout.containers, 0o755)
        versioned = layout.root / f"libvgpu-{hashlib.sha256(data).hexdigest()[:16]}.so"
        if not versioned.exists() or versioned.read_bytes() != data:
            write_atomic(versioned, data, 0o755)
        link_tmp = layout.root / f".{layout.lib.name}.link-{os.getpid()}"
        if os.path.lexists(link_tmp):
            link_tmp.unlink()
        os.symlink(versioned.name, link_tmp)
        os.replace(link_tmp, layout.lib)
        write_atomic(layout.preload, (CONTAINER_LIB + "\n").encode(), 0o644)
        _fsync_dir(layout.root)
    except OSError as e:
        raise ShimInstallError(f"cannot install into {layout.root}: {e}; run as root or give "
                               "--shim-host-dir a writable directory") from e
    return versioned
