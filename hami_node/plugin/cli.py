"""`hami-node`: the device plugin daemon and its helper commands.

    hami-node [serve] [--config FILE] [--node-name N] [--device-plugin-dir D] [--kubeconfig F] ...
    hami-node install-shim [--source LIB] [--shim-host-dir DIR]
    hami-node show-config [same flags as serve]

Exit status: 0 stopped by SIGTERM/SIGINT, 1 runtime failure, 2 configuration error.
"""
import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional

from hami_common.lifeline import watch_parent
from hami_node.plugin import config as cfg
from hami_node.plugin.errors import ConfigError, NodeAgentError

PROG = "hami-node"


def log(message: str) -> None:
    """One timestamped line on stderr."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(f"{stamp} {PROG}: {message}", file=sys.stderr, flush=True)


def config_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """Flags for every configuration key (text; converted and checked by config.resolve)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--config", help=f"YAML/JSON configuration file (or ${cfg.CONFIG_ENV})")
    for key in cfg.KEYS:
        env = ", ".join((key.env_name,) + key.env)
        default = ",".join(map(str, key.default)) if isinstance(key.default, tuple) \
            else key.default
        p.add_argument(key.flag, dest=key.field, metavar=key.kind.upper(),
                       help=f"{key.help} (env {env}; default {default!r})")
    return p


def load(args: argparse.Namespace) -> cfg.NodeConfig:
    """The effective configuration from parsed flags, the environment and the file."""
    return cfg.resolve(vars(args))


def cmd_serve(argv: List[str]) -> int:
    """Runs the daemon until SIGTERM/SIGINT."""
    parser = config_parser(f"{PROG} serve", "Serve the GPUs of this node to kubelet.")
    args = parser.parse_args(argv)
    try:
        config = load(args)
    except ConfigError as e:
        log(f"configuration error: {e}")
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    watch_parent(stop.set)      # started by a launcher (tests, the demo): end with it
    from hami_node.plugin.daemon import NodeAgent
    try:
        agent = NodeAgent(config, usage_reader=_usage_reader(), log=log).start()
    except NodeAgentError as e:
        log(f"cannot start: {e}")
        return 1
    print(f"ready socket={agent.socket_path} metrics={agent.metrics_url or '-'}",
          flush=True)
    try:
        return agent.run(stop)
    finally:
        agent.stop()
        log("stopped")


def _usage_reader():
    """The shim's shared-file reader when its Python side is installed, else None."""
    try:
        from hami_node.plugin.shimusage import read_usage
    except ImportError:
        return None
    return read_usage


def cmd_install_shim(argv: List[str]) -> int:
    """Installs libvgpu.so and ld.so.preload into the shim host directory."""
    from hami_node.plugin.install import install_shim, packaged_shim
    from hami_node.plugin.layout import HostLayout
    key = cfg.KEYS_BY_FIELD["shim_host_dir"]
    p = argparse.ArgumentParser(prog=f"{PROG} install-shim", description=cmd_install_shim.__doc__)
    p.add_argument("--source", default=None, help=f"library to install (default {packaged_shim()})")
    p.add_argument("--shim-host-dir", default=os.environ.get(key.env_name) or key.default,
                   help=f"host directory (env {key.env_name}; default {key.default})")
    args = p.parse_args(argv)
    layout = HostLayout(Path(args.shim_host_dir))
    try:
        versioned = install_shim(layout, args.source)
    except NodeAgentError as e:
        log(f"install-shim: {e}")
        return 1
    print(f"installed {versioned} as {layout.lib}", flush=True)
    return 0


def cmd_show_config(argv: List[str]) -> int:
    """Prints the effective configuration (or the error) and exits."""
    args = config_parser(f"{PROG} show-config", cmd_show_config.__doc__).parse_args(argv)
    try:
        config = load(args)
    except ConfigError as e:
        log(f"configuration error: {e}")
        return 2
    for key in cfg.KEYS:
        value = getattr(config, key.field)
        print(f"{key.name}: {','.join(map(str, value)) if isinstance(value, tuple) else value}")
    return 0


COMMANDS = {"serve": cmd_serve, "install-shim": cmd_install_shim, "show-config": cmd_show_config}


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point: a subcommand, or `serve` when the first argument is a flag or absent."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help") and len(argv) == 1:
        print(__doc__.strip())
        return 0
    if argv and not argv[0].startswith("-"):
        if argv[0] not in COMMANDS:
            log(f"unknown command {argv[0]!r}; commands: {', '.join(COMMANDS)}")
            return 2
        return COMMANDS[argv[0]](argv[1:])
    return cmd_serve(argv)


if __name__ == "__main__":
    sys.exit(main())
