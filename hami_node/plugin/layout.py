"""Where the shim's files live: on the host (configurable, default /usr/local/vgpu) and inside
every container (fixed paths, which the preload file and the environment name).

Host:                                        Container:
  <host>/libvgpu.so -> libvgpu-<sha>.so        /usr/local/vgpu/libvgpu.so      (read-only)
  <host>/ld.so.preload                         /etc/ld.so.preload              (read-only)
  <host>/containers/<pod-uid>_<ctr>/           /usr/local/vgpu/shared/         (read-write)
  <host>/containers/<pod-uid>_<ctr>.json       (not mounted: who the directory belongs to)
  <host>/claims/<claim-uid>/                   /usr/local/vgpu/shared/         (read-write, DRA)
  <host>/claims/<claim-uid>.json               (not mounted: the claim and its devices)
"""
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from hami_node.shim.settings import CACHE_NAME

CONTAINER_DIR = "/usr/local/vgpu"
CONTAINER_LIB = CONTAINER_DIR + "/libvgpu.so"
CONTAINER_SHARED_DIR = CONTAINER_DIR + "/shared"
CACHE_FILE = CACHE_NAME         # the file the shim shares inside the container directory
CONTAINER_CACHE = CONTAINER_SHARED_DIR + "/" + CACHE_FILE
PRELOAD_PATH = "/etc/ld.so.preload"
LIB_NAME = "libvgpu.so"
PRELOAD_NAME = "ld.so.preload"
CONTAINERS = "containers"
CLAIMS = "claims"


@dataclass(frozen=True)
class HostLayout:
    """The shim files under one host directory."""

    root: Path

    @property
    def lib(self) -> Path:
        """The stable name of the installed shim (a symlink to the current version)."""
        return self.root / LIB_NAME

    @property
    def preload(self) -> Path:
        """The file mounted at /etc/ld.so.preload."""
        return self.root / PRELOAD_NAME

    @property
    def containers(self) -> Path:
        """Parent of the per-container shared directories."""
        return self.root / CONTAINERS

    def container_dir(self, pod_uid: str, container: str) -> Path:
        """One container's shared directory."""
        return self.containers / f"{pod_uid}_{container}"

    def container_meta(self, pod_uid: str, container: str) -> Path:
        """Who one shared directory belongs to (read by the metrics)."""
        return self.containers / f"{pod_uid}_{container}.json"

    @property
    def claims(self) -> Path:
        """Parent of the DRA claims' shared directories."""
        return self.root / CLAIMS

    def claim_dir(self, claim_uid: str) -> Path:
        """One claim's shared directory (every container using the claim mounts it)."""
        return self.claims / claim_uid

    def claim_meta(self, claim_uid: str) -> Path:
        """The claim's namespace, name and devices (read by the metrics)."""
        return self.claims / f"{claim_uid}.json"


def prepare_container(layout: HostLayout, pod_uid: str, container: str, meta: dict) -> Path:
    """A fresh, world-writable shared directory for one container plus its metadata file.

    World-writable because the container's processes may run as any user; the directory is
    private to that container by the mount.
    """
    path = layout.container_dir(pod_uid, container)
    layout.containers.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(path, ignore_errors=True)  # a leftover of an earlier Allocate of this pod
    path.mkdir()
    os.chmod(path, 0o777)
    meta_path = layout.container_meta(pod_uid, container)
    tmp = meta_path.with_name(meta_path.name + ".tmp")
    tmp.write_text(json.dumps(meta, sort_keys=True))
    os.replace(tmp, meta_path)
    return path


def remove_container(layout: HostLayout, pod_uid: str, container: str) -> None:
    """Removes a container's shared directory and metadata (undo, or garbage collection)."""
    shutil.rmtree(layout.container_dir(pod_uid, container), ignore_errors=True)
    layout.container_meta(pod_uid, container).unlink(missing_ok=True)


def read_container_metas(layout: HostLayout) -> list:
    """Every container's metadata (dicts), skipping unreadable files."""
    return _read_metas(layout.containers)


def read_claim_metas(layout: HostLayout) -> list:
    """Every prepared DRA claim's metadata (dicts with its UID as `_uid`)."""
    return _read_metas(layout.claims)


def _read_metas(folder: Path) -> list:
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            meta = json.loads(path.read_text())
            mtime = path.stat().st_mtime
        except (OSError, ValueError):
            continue  # being written, or removed meanwhile
        if isinstance(meta, dict):
            meta["_mtime"], meta["_uid"] = mtime, path.stem
            out.append(meta)
    return out
