"""`hami-sim`: one command, many subcommands, each implemented in its own module.

Subcommands are imported lazily so that `hami-sim run` does not pay for the Kubernetes client,
and so that the GPU-only tier works on machines that lack the cluster packages.
"""
import faulthandler
import importlib
import signal
import sys

# name -> (module, function, one-line help). Each function takes argv (list) and returns an int.
COMMANDS = {
    "run": ("hami_sim.gpu.cli", "cmd_run", "run a command against the simulated GPUs"),
    "env": ("hami_sim.gpu.cli", "cmd_env", "print shell exports that select the simulated GPUs"),
    "status": ("hami_sim.gpu.cli", "cmd_status", "show each simulated GPU's memory, processes, use"),
    "inject-xid": ("hami_sim.gpu.cli", "cmd_inject_xid", "deliver an XID event to a simulated GPU"),
    "apiserver": ("hami_sim.apiserver.cli", "main", "serve the Kubernetes API server double"),
    "kubelet": ("hami_sim.kubelet.cli", "main", "run the kubelet double (device plugin side)"),
    "replay": ("hami_sim.replay.cli", "main", "replay a GPU-sharing trace through the placement"),
    "demo": ("hami_sim.demo.cli", "main", "the end-to-end demo on a simulated cluster"),
    "cluster": ("hami_sim.demo.cluster_cli", "main", "keep a simulated cluster running (cluster up)"),
}


def usage() -> str:
    """The help text listing every subcommand."""
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: hami-sim COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {spec[2]}" for name, spec in COMMANDS.items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    """Dispatches to the subcommand's module."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"hami-sim: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    # `kill -USR1` prints every thread's stack to stderr (a command that does not end, as in
    # tests/e2e's Ctrl-C checks, says where it waits).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        print(f"hami-sim {name}: not available ({exc})", file=sys.stderr)
        return 2
    return int(getattr(mod, func)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
