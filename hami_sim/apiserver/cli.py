"""`hami-sim apiserver`: serve the API server double until SIGTERM/SIGINT.

    hami-sim apiserver --listen 127.0.0.1:6443 [--tls-cert F --tls-key F] [--state-file F]
        [--node NAME[,cpu=N][,memory=Q][,pods=N]]... [--kubeconfig-out F]
        [--latency-ms MS] [--error-rate R] [--fault-rule JSON]... [--watch-history N]

Faults may also come from the environment as JSON in HAMI_SIM_APISERVER_FAULTS, and be changed
at runtime with POST /_sim/faults. The first line on stdout is `serving <url>`.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from hami_common.lifeline import watch_parent

from .faults import FaultConfigError, Faults
from .server import ApiServer, StateFileError

FAULTS_ENV = "HAMI_SIM_APISERVER_FAULTS"


class UsageError(ValueError):
    """A command-line value that cannot be used (the message names the flag)."""


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT -> (host, port); port 0 picks a free one."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--listen: expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def parse_node(text: str) -> dict:
    """NAME[,cpu=N][,memory=Q][,pods=N][,label=k=v] -> add_node() keyword arguments."""
    name, *opts = text.split(",")
    if not name:
        raise UsageError(f"--node: a name is required, got {text!r}")
    node: dict = {"name": name}
    for opt in opts:
        key, sep, value = opt.partition("=")
        if not sep or not value:
            raise UsageError(f"--node {text!r}: expected key=value, got {opt!r}")
        if key in ("cpu", "memory", "pods"):
            node[key] = value
        elif key == "label":
            lk, _, lv = value.partition("=")
            node.setdefault("labels", {})[lk] = lv
        else:
            raise UsageError(f"--node {text!r}: unknown key {key!r} (cpu, memory, pods, label)")
    return node


def build_faults(args) -> Faults:
    """Faults from the environment, then the flags."""
    faults = Faults()
    try:
        if os.environ.get(FAULTS_ENV):
            try:
                faults.update(json.loads(os.environ[FAULTS_ENV]))
            except ValueError as e:
                raise UsageError(f"{FAULTS_ENV}: {e}") from e
        spec: dict = {}
        if args.latency_ms is not None:
            spec["latency_ms"] = args.latency_ms
        if args.error_rate is not None:
            spec["error_rate"] = args.error_rate
        if args.fault_rule:
            try:
                spec["rules"] = [json.loads(r) for r in args.fault_rule]
            except ValueError as e:
                raise UsageError(f"--fault-rule: not JSON: {e}") from e
        if args.fault_seed is not None:
            spec["seed"] = args.fault_seed
        faults.update(spec)
    except FaultConfigError as e:
        raise UsageError(f"faults: {e}") from e
    return faults


def parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = argparse.ArgumentParser(prog="hami-sim apiserver",
                                description="Serve the Kubernetes API server double.")
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any free one)")
    p.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-key", help="private key for --tls-cert (PEM)")
    p.add_argument("--state-file", help="load objects from and save them to this JSON file")
    p.add_argument("--node", action="append", default=[], metavar="SPEC",
                   help="pre-create a node: NAME[,cpu=16][,memory=64Gi][,pods=110][,label=k=v]")
    p.add_argument("--kubeconfig-out", help="write a kubeconfig for this server here")
    p.add_argument("--ca-file", help="CA certificate to name in --kubeconfig-out (HTTPS)")
    p.add_argument("--watch-history", type=int, default=10000,
                   help="changes kept for watches from an old resourceVersion (older: 410)")
    p.add_argument("--watch-queue", type=int, default=1000,
                   help="events a watcher may lag behind before it is dropped")
    p.add_argument("--bookmark-interval", type=float, default=5.0, help="seconds")
    p.add_argument("--max-body", type=int, default=3 * 1024 * 1024, help="bytes")
    p.add_argument("--latency-ms", type=float, help="fault: added latency per request")
    p.add_argument("--error-rate", type=float, help="fault: fraction of requests answered 500")
    p.add_argument("--fault-rule", action="append", default=[], metavar="JSON",
                   help='fault: e.g. {"code":409,"verbs":["patch"],"resources":["pods"]}')
    p.add_argument("--fault-seed", type=int, help="seed for --error-rate")
    return p


def build_server(args) -> ApiServer:
    """An ApiServer from parsed flags (raises UsageError)."""
    host, port = parse_listen(args.listen)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    for flag in ("tls_cert", "tls_key", "ca_file"):
        path = getattr(args, flag)
        if path and not os.path.isfile(path):
            raise UsageError(f"--{flag.replace('_', '-')}: no such file {path}")
    if args.watch_history < 1 or args.watch_queue < 1:
        raise UsageError("--watch-history and --watch-queue must be at least 1")
    nodes = [parse_node(n) for n in args.node]
    return ApiServer(host, port, tls_cert=args.tls_cert, tls_key=args.tls_key,
                     state_file=args.state_file, history=args.watch_history,
                     watch_queue=args.watch_queue, max_body=args.max_body,
                     bookmark_interval=args.bookmark_interval, faults=build_faults(args),
                     nodes=nodes)


def main(argv=None) -> int:
    """Entry point of `hami-sim apiserver`."""
    args = parser().parse_args(argv)
    try:
        server = build_server(args)
        server.start()
    except (UsageError, StateFileError) as e:
        print(f"hami-sim apiserver: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"hami-sim apiserver: cannot serve on {args.listen}: {e}", file=sys.stderr)
        return 1
    if args.kubeconfig_out:
        from hami_sim.kubeconfig import write_kubeconfig
        write_kubeconfig(args.kubeconfig_out, server.url, ca_file=args.ca_file)
    print(f"serving {server.url}", flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    watch_parent(done.set)      # started by a launcher: end with it
    done.wait()
    server.stop()
    return 0
