"""`hami-run`: GPU sharing on bare metal, without Kubernetes. Runs a command with the shim
preloaded and the given limits; every process the command starts shares them through one
shared accounting file (a fresh one per invocation unless --cache names one)."""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from hami_node.shim.errors import ShimConfigError, ShimError
from hami_node.shim.probe import DeviceProbe, DriverProbe
from hami_node.shim.settings import CACHE_NAME, ShimSettings, shim_env
from hami_node.shim.sizes import parse_size

_DEVICE = re.compile(r"[0-9]+|GPU-[0-9a-fA-F-]+", re.ASCII)
_FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def parse_args(argv: List[str]) -> argparse.Namespace:
    """The command line; ShimConfigError for values that make no sense."""
    p = argparse.ArgumentParser(
        prog="hami-run", usage="hami-run [--gpu-mem SIZE | --gpu-mem-percent P] [--gpu-cores P] "
        "[--devices LIST] [--sim] [--cache PATH] [-v] -- CMD...", description=__doc__)
    mem = p.add_mutually_exclusive_group()
    mem.add_argument("--gpu-mem", metavar="SIZE", help="memory limit per device: bytes, or "
                     "k/m/g (KiB/MiB/GiB), e.g. 4g")
    mem.add_argument("--gpu-mem-percent", metavar="P", type=float,
                     help="memory limit per device as a percentage of its size")
    p.add_argument("--gpu-cores", metavar="P", type=int, help="compute limit: percent of the "
                   "device's time (0 or 100: none)")
    p.add_argument("--devices", metavar="LIST", help="GPUs to expose: indices or UUIDs, "
                   "comma-separated (renumbered from 0 for the command)")
    p.add_argument("--sim", action="store_true", help="run against the simulated GPUs")
    p.add_argument("--cache", metavar="PATH", help="shared accounting file to use (kept); "
                   "default: a fresh one, removed when the command ends")
    p.add_argument("-v", "--verbose", action="store_true", help="say what is set up")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")
    args = p.parse_args(argv)
    if args.cmd and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    if not args.cmd:
        raise ShimConfigError("give the command to run after --, e.g. hami-run --gpu-mem 4g "
                              "-- python train.py")
    if args.gpu_mem is not None:
        args.gpu_mem = parse_size(args.gpu_mem, "--gpu-mem")
    if args.gpu_mem_percent is not None and not 0 < args.gpu_mem_percent <= 100:
        raise ShimConfigError(f"--gpu-mem-percent {args.gpu_mem_percent:g} must be above 0 and "
                              "at most 100")
    if args.gpu_cores is not None and not 0 <= args.gpu_cores <= 100:
        raise ShimConfigError(f"--gpu-cores {args.gpu_cores} must be from 0 to 100 "
                              "(0 = no limit)")
    if args.devices is not None:
        bad = [d for d in args.devices.split(",") if not _DEVICE.fullmatch(d.strip())]
        if bad or not args.devices.strip():
            raise ShimConfigError(f"--devices {args.devices!r}: give GPU indices or UUIDs "
                                  "separated by commas, e.g. 0,2")
    return args


def base_env(args: argparse.Namespace) -> Dict[str, str]:
    """The command's environment before the shim: devices and, with --sim, the simulator."""
    env = dict(os.environ)
    devices = args.devices.replace(" ", "") if args.devices else None
    if args.sim:
        from hami_sim.gpu import SimGpuError, sim_env  # only --sim needs the simulator
        try:
            return sim_env(base=env, visible=devices)
        except SimGpuError as e:
            raise ShimError(str(e)) from e
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = devices
    return env


# Below this, a cap may not hold even a CUDA context (300-600 MiB on data-centre GPUs): the
# driver is asked what one takes before the command starts.
_CHECK_BELOW = 2 << 30


def check_room_for_a_context(args: argparse.Namespace, env: Dict[str, str],
                             limits: Dict[int, int], probe: DeviceProbe) -> None:
    """ShimConfigError when a device's cap is smaller than what a CUDA context takes there by
    itself: the command could do nothing on it (its first context would be refused)."""
    if not limits or min(limits.values()) >= _CHECK_BELOW:
        return
    for i, cost in enumerate(probe.context_costs(env)):
        limit = limits.get(i, limits.get(-1))
        if cost and limit is not None and limit < cost:
            hint = ""
            if args.gpu_mem is not None and args.gpu_mem < 1 << 20:
                hint = (f"; a bare number is bytes, as in HAMi: did you mean --gpu-mem "
                        f"{args.gpu_mem}m?")
            raise ShimConfigError(f"device {i}: a limit of {format_size(limit)} is less than "
                                  f"the {format_size(cost)} a CUDA context takes there by "
                                  f"itself, so the command could not use it{hint}")


def format_size(n: int) -> str:
    return f"{n} bytes" if n < 1 << 20 else f"{n / (1 << 20):.0f} MiB"


def settings_for(args: argparse.Namespace, env: Dict[str, str], cache: Path,
                 probe: DeviceProbe) -> ShimSettings:
    """The limits the command runs with."""
    per_device = {}
    if args.gpu_mem_percent is not None:
        totals = probe.totals(env)
        per_device = {i: int(t * args.gpu_mem_percent / 100) >> 20 << 20
                      for i, t in enumerate(totals)}
    limits = dict(per_device) or ({-1: args.gpu_mem} if args.gpu_mem is not None else {})
    check_room_for_a_context(args, env, limits, probe)
    return ShimSettings(memory_limit=args.gpu_mem, device_memory_limits=per_device,
                        sm_limit=args.gpu_cores, cache_path=str(cache))


def run_command(cmd: List[str], env: Dict[str, str]) -> int:
    """Runs the command to its end; its exit status (128 + N when killed by signal N)."""
    try:
        child = subprocess.Popen(cmd, env=env)
    except OSError as e:
        print(f"hami-run: cannot run {cmd[0]!r}: {e.strerror}", file=sys.stderr)
        return 126 if isinstance(e, PermissionError) else 127
    # Ctrl-C reaches the command through the terminal; other signals sent to hami-run alone
    # are passed on, so the command always ends first and the shared file is removed after.
    previous = {sig: signal.signal(sig, lambda s, _f: child.send_signal(s)) for sig in _FORWARDED}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        rc = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - rc if rc < 0 else rc


def prepare(args: argparse.Namespace, probe: DeviceProbe) -> Tuple[Dict[str, str], Optional[Path]]:
    """The command's full environment, and the folder to remove afterwards (if any)."""
    env = base_env(args)
    owned = None if args.cache else Path(tempfile.mkdtemp(prefix="hami-run-"))
    cache = Path(args.cache).resolve() if args.cache else owned / CACHE_NAME
    done = False
    try:
        full = shim_env(settings_for(args, env, cache, probe), base=env)
        done = True
        return full, owned
    finally:
        if owned and not done:  # the command will not run: nothing may stay behind
            shutil.rmtree(owned, ignore_errors=True)


def main(argv: Optional[List[str]] = None, probe: Optional[DeviceProbe] = None) -> int:
    """Entry point of hami-run."""
    try:
        args = parse_args(list(sys.argv[1:] if argv is None else argv))
        env, owned = prepare(args, probe or DriverProbe())
    except ShimError as e:
        print(f"hami-run: {e}", file=sys.stderr)
        return 2
    if args.verbose:
        shown = sorted(k for k in env if k.startswith(("CUDA_", "HAMI_", "GPU_", "LD_PRELOAD")))
        print("hami-run: " + " ".join(f"{k}={env[k]}" for k in shown), file=sys.stderr)
    try:
        return run_command(args.cmd, env)
    finally:
        if owned:
            shutil.rmtree(owned, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
