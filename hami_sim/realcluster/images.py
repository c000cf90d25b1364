"""The node's images, made locally and imported into containerd, no registry involved.

- the pause image (the pods' sandboxes): a one-layer image holding a static `pause` built
  from pause.c with the host's C compiler;
- the workload image, tagged as the examples name it (ghcr.io/hami-py/hami-py:0.1.0): a
  skeleton root filesystem (empty folders, /bin -> usr/bin and friends, passwd/group) whose
  /usr, Python and project checkout the runtime wrapper (oci_runtime.py) bind-mounts from the
  host; its PATH starts with the project's .venv/bin, so `python3` is the project's Python.
  The same image runs hami-control and hami-node in the installed mode (the chart's default
  image name is this one);
- in the installed mode, kube-scheduler's image (the static binary built by tools/k8s) and an
  older-glibc image: the Debian bullseye root filesystem of tools/rootfs/build.sh as it is.

Each is a docker-archive tar (manifest.json, the image config, one layer tar) that
`ctr -n k8s.io images import` reads.
"""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

PAUSE_IMAGE = "hami-k8s.local/pause:1"
WORKLOAD_IMAGE = "ghcr.io/hami-py/hami-py:0.1.0"
SCHEDULER_IMAGE = "hami-k8s.local/kube-scheduler:{version}"
BULLSEYE_IMAGE = "hami-k8s.local/bullseye-python3:1"
HOST_USERLAND_MARK = ".hami-host-userland"     # the runtime wrapper mounts the host's userland
DEBIAN_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SKELETON_DIRS = ("dev", "proc", "sys", "etc", "tmp", "run", "var/tmp", "root", "home",
                 "usr/local/nvidia/lib64", "usr/bin", "usr/lib", "usr/lib64", "usr/sbin",
                 "usr/share")
SKELETON_LINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}
ETC_FILES = {"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
             "etc/group": "root:x:0:\n", "etc/nsswitch.conf": "hosts: files dns\n"}
SKELETON_FILES = {**ETC_FILES, HOST_USERLAND_MARK: ""}


class ImageError(RuntimeError):
    """An image could not be built or imported."""


def _layer(entries) -> bytes:
    """A layer tar from (name, kind, payload, mode) entries: kind dir, link or file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, payload, mode in entries:
            info = tarfile.TarInfo(name)
            info.mode, info.mtime = mode, 0
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, payload
                tar.addfile(info)
            else:
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _archive(path: Path, tag: str, layer, config: dict) -> Path:
    """A docker-archive of one layer (bytes, or a Path to a layer tar)."""
    if isinstance(layer, Path):
        digest = hashlib.sha256()
        with open(layer, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        diff_id = "sha256:" + digest.hexdigest()
    else:
        diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    image_config = {"architecture": "amd64", "os": "linux", "config": config,
                    "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    blob = json.dumps(image_config).encode()
    config_name = hashlib.sha256(blob).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": ["layer.tar"]}]
    with tarfile.open(path, "w") as tar:
        if isinstance(layer, Path):
            tar.add(str(layer), arcname="layer.tar")
            members = ()
        else:
            members = (("layer.tar", layer),)
        for name, data in (*members, (config_name, blob),
                           ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def pause_archive(workdir: Path) -> Path:
    """The pause image's archive (pause built with `cc -static`)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise ImageError("a C compiler (cc) is needed to build the pause binary")
    binary = workdir / "pause"
    done = subprocess.run([cc, "-static", "-O2", "-o", str(binary),
                           str(Path(__file__).with_name("pause.c"))],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ImageError(f"building pause failed: {done.stderr.strip()[-800:]}")
    layer = _layer([("pause", "file", binary.read_bytes(), 0o755)])
    return _archive(workdir / "pause.tar", PAUSE_IMAGE, layer, {"Entrypoint": ["/pause"]})


def workload_archive(workdir: Path, venv_bin: str) -> Path:
    """The workload image's archive (the skeleton; see the module's doc)."""
    entries = [(d, "dir", None, 0o755) for d in SKELETON_DIRS]
    entries[SKELETON_DIRS.index("tmp")] = ("tmp", "dir", None, 0o1777)
    entries += [(name, "link", target, 0o777) for name, target in SKELETON_LINKS.items()]
    entries += [(name, "file", text.encode(), 0o644) for name, text in SKELETON_FILES.items()]
    path = f"{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return _archive(workdir / "workload.tar", WORKLOAD_IMAGE, _layer(entries),
                    {"Env": [f"PATH={path}"], "WorkingDir": "/", "Cmd": ["python3"]})


def scheduler_archive(workdir: Path, binary: str, tag: str) -> Path:
    """kube-scheduler's image: the static binary on PATH, nothing else it needs."""
    entries = [(d, "dir", None, 0o755) for d in ("etc", "usr", "usr/local", "usr/local/bin")]
    entries += [("tmp", "dir", None, 0o1777),
                ("etc/nsswitch.conf", "file", ETC_FILES["etc/nsswitch.conf"].encode(), 0o644),
                ("usr/local/bin/kube-scheduler", "file", Path(binary).read_bytes(), 0o755)]
    return _archive(workdir / "kube-scheduler.tar", tag, _layer(entries),
                    {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
                     "Entrypoint": ["/usr/local/bin/kube-scheduler"]})


def rootfs_archive(workdir: Path, rootfs: str, tag: str) -> Path:
    """An image of a root filesystem folder as it is (tar keeps owners, modes and links)."""
    layer = workdir / "rootfs-layer.tar"
    done = subprocess.run(["tar", "-C", rootfs, "--numeric-owner", "-cf", str(layer), "."],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise ImageError(f"tar of {rootfs} failed: {done.stderr.strip()[-800:]}")
    try:
        return _archive(workdir / "rootfs.tar", tag, layer,
                        {"Env": [DEBIAN_PATH], "Cmd": ["/bin/sh"]})
    finally:
        layer.unlink()


def import_images(ctr_address: str, workdir: Path, extra=()) -> None:
    """Builds the pause and workload archives (and the extra ones: callables taking workdir)
    and imports them into containerd's k8s.io namespace."""
    workdir.mkdir(parents=True, exist_ok=True)
    venv_bin = str(Path(sys.executable).parent)
    for archive in (pause_archive(workdir), workload_archive(workdir, venv_bin),
                    *(make(workdir) for make in extra)):
        done = subprocess.run(["ctr", "--address", ctr_address, "-n", "k8s.io", "images",
                               "import", str(archive)], capture_output=True, text=True,
                              timeout=300)
        archive.unlink()
        if done.returncode != 0:
            raise ImageError(f"ctr images import {archive.name} failed: "
                             f"{(done.stderr or done.stdout).strip()[-800:]}")
