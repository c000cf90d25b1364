"""`hami-sim kubelet`: run the kubelet double for one node until SIGTERM/SIGINT.

    hami-sim kubelet --node-name NODE --plugin-dir DIR (--kubeconfig F | --server URL)
        [--record-dir DIR] [--sync-interval S] [--retry-base S] [--retry-max S]

SIGHUP simulates a kubelet restart (sockets in the plugin dir removed, kubelet.sock served
anew). Each container's allocation is dumped to <record-dir>/<namespace>/<pod>/<container>.json
and a pod's latest allocation failure to .../failure.json. The first stdout line is `ready`.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from kubernetes.client.rest import ApiException

from hami_common.deviceplugin import DEFAULT_PLUGIN_DIR
from hami_common.lifeline import watch_parent

from .kubelet import KubeletDouble


def parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = argparse.ArgumentParser(prog="hami-sim kubelet", description="Run the kubelet double.")
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                   help="node to serve (default: $NODE_NAME)")
    p.add_argument("--plugin-dir", default=DEFAULT_PLUGIN_DIR)
    p.add_argument("--kubeconfig", help="kubeconfig of the API server")
    p.add_argument("--server", help="API server URL (plain HTTP), instead of --kubeconfig")
    p.add_argument("--record-dir", help="dump allocations and failures here")
    p.add_argument("--sync-interval", type=float, default=1.0, help="seconds between syncs")
    p.add_argument("--retry-base", type=float, default=1.0,
                   help="first retry delay after an allocation failure (doubles each time)")
    p.add_argument("--retry-max", type=float, default=30.0, help="longest retry delay")
    return p


def main(argv=None) -> int:
    """Entry point of `hami-sim kubelet`."""
    args = parser().parse_args(argv)
    if not args.node_name:
        print("hami-sim kubelet: --node-name (or NODE_NAME) is required", file=sys.stderr)
        return 2
    if bool(args.kubeconfig) == bool(args.server):
        print("hami-sim kubelet: give exactly one of --kubeconfig or --server", file=sys.stderr)
        return 2
    if args.kubeconfig and not os.path.isfile(args.kubeconfig):
        print(f"hami-sim kubelet: --kubeconfig: no such file {args.kubeconfig}", file=sys.stderr)
        return 2
    api_client = None
    if args.server:
        from hami_sim.kubeconfig import api_client_for
        api_client = api_client_for(args.server)
    kubelet = KubeletDouble(args.node_name, args.plugin_dir, api_client,
                            kubeconfig=args.kubeconfig, record_dir=args.record_dir,
                            sync_interval=args.sync_interval, retry_base=args.retry_base,
                            retry_max=args.retry_max)
    try:
        kubelet.start()
    except (ApiException, OSError) as e:
        print(f"hami-sim kubelet: cannot start: {e}", file=sys.stderr)
        return 1
    print("ready", flush=True)
    stop, restart = threading.Event(), threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    watch_parent(stop.set)      # started by a launcher: end with it
    signal.signal(signal.SIGHUP, lambda *_: restart.set())
    while not stop.wait(0.1):
        if restart.is_set():
            restart.clear()
            kubelet.restart()
    kubelet.stop()
    return 0
