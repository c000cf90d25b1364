"""`hami-sim run | env | status | inject-xid`: use and inspect the simulated GPUs."""
import argparse
import ctypes
import dataclasses
import json
import os
import shlex
import sys
from typing import List

from hami_sim.gpu.env import SimGpuError, lib_dir, sim_env, state_dir_of
from hami_sim.gpu.state import STATE_FILE, StateError, device_status, read_state

EXPORTED = ("LD_LIBRARY_PATH", "HAMI_SIM_GPUS", "HAMI_SIM_STATE", "HAMI_SIM_UUID_SEED",
            "HAMI_SIM_CTX_OVERHEAD", "HAMI_SIM_MODULE_MEM", "HAMI_SIM_PID_OFFSET")


def _env_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--gpus", help="device specs MEMORY[/SMS[/NAME]],... (sets HAMI_SIM_GPUS)")
    p.add_argument("--state", help="shared state directory (sets HAMI_SIM_STATE)")
    p.add_argument("--uuid-seed", help="mixes into device UUIDs (sets HAMI_SIM_UUID_SEED)")
    return p


def _build_env(args) -> dict:
    return sim_env(gpus=args.gpus, state_dir=args.state, uuid_seed=args.uuid_seed)


def cmd_run(argv: List[str]) -> int:
    """Runs a command against the simulated GPUs (replaces this process)."""
    p = _env_parser("hami-sim run", "run COMMAND with the simulated libcuda and libnvidia-ml")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give a command to run, e.g. hami-sim run -- python3 app.py")
    try:
        env = _build_env(args)
    except SimGpuError as e:
        print(f"hami-sim run: {e}", file=sys.stderr)
        return 2
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        print(f"hami-sim run: cannot run {command[0]!r}: {e.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached: exec replaced the process


def cmd_env(argv: List[str]) -> int:
    """Prints shell exports selecting the simulated GPUs: eval "$(hami-sim env)"."""
    args = _env_parser("hami-sim env", "print shell exports for the simulated GPUs").parse_args(argv)
    try:
        env = _build_env(args)
    except SimGpuError as e:
        print(f"hami-sim env: {e}", file=sys.stderr)
        return 2
    for key in EXPORTED:
        if key in env:
            print(f"export {key}={shlex.quote(env[key])}")
    return 0


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def cmd_status(argv: List[str]) -> int:
    """Shows each simulated device's memory, processes and utilization."""
    p = argparse.ArgumentParser(prog="hami-sim status", description=cmd_status.__doc__)
    p.add_argument("--state", help="state directory (default: HAMI_SIM_STATE or per-user temp)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    path = (state_dir_of({"HAMI_SIM_STATE": args.state}) if args.state else state_dir_of())
    try:
        devices = device_status(read_state(path / STATE_FILE))
    except StateError as e:
        print(f"hami-sim status: {e} (has any program used the simulated GPUs yet?)",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([dataclasses.asdict(d) for d in devices], indent=2))
        return 0
    for d in devices:
        print(f"GPU {d.index}  {d.name}  {d.uuid}")
        print(f"  memory  {_gib(d.used_bytes)} / {_gib(d.total_bytes)} used   "
              f"utilization {d.utilization}%")
        for proc in d.processes:
            print(f"  pid {proc.pid:>8}  {_gib(proc.used_bytes):>12}  {proc.utilization:>3}%")
    return 0


def cmd_inject_xid(argv: List[str]) -> int:
    """Delivers an XID event on a device to every NVML event set waiting on it."""
    p = argparse.ArgumentParser(prog="hami-sim inject-xid", description=cmd_inject_xid.__doc__)
    p.add_argument("device", type=int, help="device index")
    p.add_argument("xid", type=int, help="XID number, e.g. 79 (fallen off the bus)")
    args = p.parse_args(argv)
    if args.xid < 0:
        p.error("xid must be a non-negative number")
    try:
        lib = ctypes.CDLL(str(lib_dir() / "libnvidia-ml.so.1"))
    except (SimGpuError, OSError) as e:
        print(f"hami-sim inject-xid: {e}", file=sys.stderr)
        return 2
    lib.hamiSimInjectXid.argtypes = [ctypes.c_uint, ctypes.c_ulonglong]
    rc = lib.hamiSimInjectXid(args.device, args.xid)
    if rc != 0:
        print(f"hami-sim inject-xid: no simulated device {args.device} "
              "(check HAMI_SIM_GPUS / HAMI_SIM_STATE)", file=sys.stderr)
        return 1
    return 0
