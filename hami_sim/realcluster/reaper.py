"""Leaves nothing running: the real cluster's processes, its containers and their mounts.

`reap(...)` kills the process groups the cluster started (listed one per line in a file as
they start), every process in the kubelet's cgroup subtree (the containers), the containerd
shims serving our containerd socket, and unmounts what is still mounted under the work
folder. The launcher calls it when it stops; a watchdog process calls it too when the launcher
dies, however (`python -m hami_sim.realcluster.reaper ...`, started with a lifeline pipe as
stdin: the read returns at end of file, when the launcher is gone).
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
GRACE_S = 5.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:        # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def kill_groups(pgids: list, grace: float = GRACE_S) -> None:
    """SIGTERM to each process group (last started first), SIGKILL to what outlives grace."""
    for pgid in reversed(pgids):
        try:
            os.killpg(pgid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pgids):
        time.sleep(0.1)
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def cgroup_dirs(name: str) -> list:
    """Every folder of the cgroup subtree `name` in every v1 hierarchy, deepest first."""
    found = []
    for hierarchy in CGROUP_FS.iterdir() if CGROUP_FS.is_dir() else ():
        top = hierarchy / name
        if top.is_dir() and not hierarchy.is_symlink():
            found += [Path(d) for d, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def kill_cgroup(name: str) -> None:
    """SIGKILL to every process in the subtree, then removes its empty folders."""
    for _ in range(20):
        pids = set()
        for d in cgroup_dirs(name):
            try:
                pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pass
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    for d in cgroup_dirs(name):
        try:
            d.rmdir()
        except OSError:
            pass


def kill_shims(containerd_socket: str) -> None:
    """SIGKILL to the containerd shims started for our containerd (their command line names
    its socket), which outlive containerd by design."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"containerd-shim" in argv[0] and containerd_socket.encode() in argv:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def unmount_under(root: Path) -> None:
    """Lazily unmounts every mount point under root, deepest first."""
    prefix = str(root.resolve()).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix):
            points.append(point)
    for point in sorted(set(points), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def read_pgids(path: Path) -> list:
    """The process groups listed in path (one per line)."""
    try:
        return [int(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return []


def reap(pgid_file: Path, cgroup: str, containerd_socket: str, workdir: Path) -> None:
    """Everything the cluster left: processes, containers, shims, mounts. cgroup '': a
    cluster without a node (scheduling only) leaves the machine-wide cgroup alone: another
    cluster's containers may be running there."""
    kill_groups(read_pgids(pgid_file))
    if cgroup:
        kill_cgroup(cgroup)
    kill_shims(containerd_socket)
    unmount_under(workdir)


def main(argv=None) -> int:
    """The watchdog: waits for end of file on stdin, then reaps."""
    p = argparse.ArgumentParser(prog="python -m hami_sim.realcluster.reaper")
    p.add_argument("--pgid-file", required=True)
    p.add_argument("--cgroup", required=True)
    p.add_argument("--containerd-socket", required=True)
    p.add_argument("--workdir", required=True)
    args = p.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the launcher's to handle
    sys.stdin.buffer.read()
    reap(Path(args.pgid_file), args.cgroup, args.containerd_socket, Path(args.workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
