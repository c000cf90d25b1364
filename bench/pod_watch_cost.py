"""What watching every pod costs hami-control, against watching only its own.

With CPU/memory tracking (the default) hami-control watches every unfinished pod of the cluster,
whatever its scheduler; with --no-track-cpu-memory only the pods of hami-scheduler. This starts
the API server double with N bound pods of another scheduler (plus one GPU node), starts
hami-control in each mode, and measures its CPU seconds to list them (start-up, every relist)
and to follow M status updates of those pods (kubelet's churn), and its resident memory; the
default mode's start-up CPU and memory are also printed as ratios to the other mode's, measured
in the same run (the other mode follows no update of those pods: 0 CPU, no ratio).

    python bench/pod_watch_cost.py [--pods 2000] [--updates 2000]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import psutil

from hami_sim.control_launch import start_control
from hami_sim.extender_client import JsonHttp
from hami_sim.launch import start_apiserver

from benchlib import print_machine, ratio

MERGE = "application/merge-patch+json"
QUIET = ["--no-leader-elect", "--handshake-interval", "0", "--log-level", "warning"]


def _other_pod(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"web-{i}", "namespace": "default",
                         "labels": {"app": "web"}, "annotations": {"team": "a"}},
            "spec": {"schedulerName": "default-scheduler", "nodeName": f"cpu-{i % 50}",
                     "containers": [{"name": "c", "image": "nginx:1.27", "resources": {
                         "requests": {"cpu": "250m", "memory": "256Mi"}}}]}}


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def _wait_idle(proc: psutil.Process, quiet_s: float = 0.5) -> float:
    """Waits until the process uses no CPU for quiet_s; returns its CPU seconds."""
    before = _cpu(proc)
    while True:
        time.sleep(quiet_s)
        now = _cpu(proc)
        if now - before < 0.01:
            return now
        before = now


def measure(apiserver, updates: int, extra: list) -> dict:
    """hami-control's CPU to start (list everything) and to follow `updates` pod updates."""
    api = JsonHttp(apiserver.url)
    start = time.perf_counter()
    control = start_control(apiserver.kubeconfig, process=True, extra_args=QUIET + extra)
    try:
        ready_s = time.perf_counter() - start
        proc = psutil.Process(control.process.pid)
        listed = _wait_idle(proc)
        for i in range(updates):
            status, body = api.post(f"/api/v1/namespaces/default/pods/web-{i % 2000}/status",
                                    {"status": {"phase": "Running", "message": str(i)}},
                                    "PATCH", MERGE)
            assert status == 200, body
        followed = _wait_idle(proc) - listed
        return {"ready_s": round(ready_s, 2), "start_cpu_s": round(listed, 2),
                "update_cpu_ms": round(followed * 1000 / max(updates, 1), 3),
                "rss_mib": round(proc.memory_info().rss / 2**20, 1)}
    finally:
        control.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=2000, help="bound pods of another scheduler")
    p.add_argument("--updates", type=int, default=2000, help="status updates to follow")
    args = p.parse_args(argv)
    apiserver = start_apiserver(process=True, extra_args=["--watch-queue", "100000"])
    try:
        api = JsonHttp(apiserver.url)
        for i in range(args.pods):
            status, body = api.post("/api/v1/namespaces/default/pods", _other_pod(i))
            assert status == 201, body
        results = {}
        for mode, extra in (("all pods (default)", []),
                            ("own pods (--no-track-cpu-memory)", ["--no-track-cpu-memory"])):
            results[mode] = measure(apiserver, min(args.updates, args.pods), extra)
            print(f"{mode}: ready in {results[mode]['ready_s']} s, "
                  f"{results[mode]['start_cpu_s']} CPU s to start and list, "
                  f"{results[mode]['update_cpu_ms']} CPU ms per pod update, "
                  f"{results[mode]['rss_mib']} MiB resident")
    finally:
        apiserver.stop()
    print_machine()
    every, own = results.values()
    for key, unit in (("start_cpu_s", " CPU s"), ("rss_mib", " MiB")):
        ratio(key, every[key], own[key], "watching every pod", "watching its own", unit)
    print(json.dumps({"pods": args.pods, "updates": args.updates, **results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
