"""A container runtime, emulated: run a container's command as a local process with what the
device plugin's Allocate answer (as recorded by the kubelet double) would give it.

    from hami_sim.container import run_container
    alloc = kubelet.wait_allocated("default", "pod-1")[0]       # or a dumped .json path
    done = run_container(alloc, node_env=sim_env(gpus=..., state_dir=...),
                         command=[sys.executable, "app.py"], timeout=30)

What a real runtime does and how it is emulated here:
- the answer's environment, then the container spec's own `env` on top (kubelet's order);
- mounts become path rewrites: an environment value inside a mounted container path is
  rewritten to the host path (e.g. CUDA_DEVICE_MEMORY_SHARED_CACHE);
- the `/etc/ld.so.preload` mount: the libraries the host file lists (container paths) are
  mapped through the mounts and become LD_PRELOAD;
- `NVIDIA_VISIBLE_DEVICES` (what nvidia-container-runtime exposes) becomes the simulator's
  visibility variable, so the process sees only those GPUs, renumbered from 0;
- underneath all of it, the node's simulated-GPU environment (`sim_env`).
Device nodes are not emulated (the simulated driver needs none).
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

PRELOAD_FILE = "/etc/ld.so.preload"
# The one place that maps the container runtime's GPU selection onto the simulator's.
RUNTIME_VISIBLE_VAR = "NVIDIA_VISIBLE_DEVICES"
SIM_VISIBLE_VAR = "HAMI_SIM_VISIBLE_DEVICES"

AllocationLike = Union[Mapping, str, os.PathLike, object]


class ContainerError(Exception):
    """The recorded answer cannot be run (malformed, or a preload the mounts cannot reach)."""


def load_allocation(allocation: AllocationLike) -> dict:
    """The answer as a dict: from a ContainerAllocation, a dict, or a dumped JSON file."""
    if isinstance(allocation, (str, os.PathLike)):
        try:
            return json.loads(Path(allocation).read_text())
        except (OSError, ValueError) as e:
            raise ContainerError(f"cannot read the allocation {allocation}: {e}") from e
    if is_dataclass(allocation):
        return asdict(allocation)
    if isinstance(allocation, Mapping):
        return dict(allocation)
    raise ContainerError(f"not an allocation: {type(allocation).__name__}")


def host_path(path: str, mounts: Sequence[Mapping]) -> Optional[str]:
    """The host path a container path resolves to through the mounts (the deepest mount
    containing it wins), or None when no mount covers it."""
    best = None
    for m in mounts:
        target = m["container_path"].rstrip("/") or "/"
        if path == target or path.startswith(target + "/"):
            if best is None or len(target) > len(best[0]):
                best = (target, m["host_path"])
    if best is None:
        return None
    target, host = best
    return host + path[len(target):]


def _rewrite(value: str, mounts: Sequence[Mapping]) -> str:
    """A value naming a mounted container path, as the host sees it (else unchanged)."""
    if not value.startswith("/"):
        return value
    return host_path(value, mounts) or value


def preload_libraries(mounts: Sequence[Mapping]) -> list:
    """Host paths of the libraries the mounted /etc/ld.so.preload lists."""
    source = next((m["host_path"] for m in mounts if m["container_path"] == PRELOAD_FILE), None)
    if source is None:
        return []
    try:
        entries = Path(source).read_text().split()
    except OSError as e:
        raise ContainerError(f"the preload file {source} mounted at {PRELOAD_FILE} cannot be "
                             f"read: {e.strerror}") from e
    libraries = []
    for entry in entries:
        mapped = host_path(entry, mounts)
        if mapped is None:
            raise ContainerError(f"{PRELOAD_FILE} lists {entry}, which no mount provides")
        libraries.append(mapped)
    return libraries


def _visible(value: Optional[str]) -> str:
    if value is None or value.strip() in ("", "void", "none"):
        return "none"
    return value.strip()


def container_env(allocation: AllocationLike, node_env: Mapping[str, str],
                  extra_env: Optional[Mapping[str, str]] = None) -> dict:
    """The environment the container's processes get."""
    alloc = load_allocation(allocation)
    mounts = alloc.get("mounts") or []
    env = dict(node_env)
    for source in (alloc.get("envs") or {}, alloc.get("spec_env") or {}, extra_env or {}):
        env.update({k: _rewrite(str(v), mounts) for k, v in source.items()})
    env[SIM_VISIBLE_VAR] = _visible(env.get(RUNTIME_VISIBLE_VAR))
    libraries = preload_libraries(mounts)
    if libraries:
        env["LD_PRELOAD"] = ":".join(libraries + [p for p in env.get("LD_PRELOAD", "").split(":")
                                                  if p and p not in libraries])
    return env


def container_command(allocation: AllocationLike,
                      command: Optional[Sequence[str]] = None) -> list:
    """The argv: `command` if given, else the spec's command + args."""
    if command:
        return list(command)
    alloc = load_allocation(allocation)
    argv = list(alloc.get("command") or []) + list(alloc.get("args") or [])
    if not argv:
        raise ContainerError(f"container {alloc.get('container')!r} has no command in its spec; "
                             "pass command=[...]")
    return argv


def _prepare(allocation: AllocationLike, node_env: Mapping[str, str],
             command: Optional[Sequence[str]],
             extra_env: Optional[Mapping[str, str]]) -> tuple:
    """(argv, environment), the allocation read once (a dumped file is not read twice)."""
    alloc = load_allocation(allocation)
    return container_command(alloc, command), container_env(alloc, node_env, extra_env)


def start_container(allocation: AllocationLike, node_env: Mapping[str, str],
                    command: Optional[Sequence[str]] = None,
                    extra_env: Optional[Mapping[str, str]] = None, **popen) -> subprocess.Popen:
    """Starts the container's command in its own session (stop it by process group)."""
    popen.setdefault("start_new_session", True)
    argv, env = _prepare(allocation, node_env, command, extra_env)
    return subprocess.Popen(argv, env=env, **popen)


def run_container(allocation: AllocationLike, node_env: Mapping[str, str],
                  command: Optional[Sequence[str]] = None,
                  extra_env: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                  **popen) -> subprocess.CompletedProcess:
    """Runs the container's command to completion (text output captured)."""
    popen.setdefault("capture_output", True)
    popen.setdefault("text", True)
    popen.setdefault("start_new_session", True)
    argv, env = _prepare(allocation, node_env, command, extra_env)
    return subprocess.run(argv, env=env, timeout=timeout, **popen)
