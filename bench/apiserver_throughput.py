"""Requests per second the API server double sustains on loopback with keep-alive.

Starts `hami-sim apiserver` as its own process, then drives it from client processes with
persistent HTTP/1.1 connections: GET one pod, PATCH a pod's annotations (merge patch), LIST
pods with a field selector (100 pods in the namespace), and watch fan-out (W watchers, one
writer: events delivered per second). Prints one line per figure and a JSON summary.

Reference measured in the same run: the floor of a Python HTTP server on this machine, a
keep-alive `http.server` process that answers every GET with the same pod's bytes (no routing,
no store); each figure is also printed as a ratio to that floor's GET rate.

    python bench/apiserver_throughput.py [--seconds 3] [--clients 4] [--watchers 20]
"""
from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from benchlib import print_machine, ratio

POD = {"apiVersion": "v1", "kind": "Pod",
       "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}


def start_server() -> tuple[subprocess.Popen, str]:
    """The API server double in its own process; returns it and its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "hami_sim.cli", "apiserver", "--listen",
                             "127.0.0.1:0", "--watch-queue", "100000"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("serving "):
        proc.kill()
        raise SystemExit(f"the API server did not start: {line!r}")
    return proc, line.split()[1]


def _serve_floor(body: bytes, port_out) -> None:
    # One write per response and TCP_NODELAY, as the double does: otherwise Nagle and delayed
    # ACKs, not the server, set the rate.
    response = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    class Fixed(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self):  # noqa: N802 (the base class's naming)
            self.wfile.write(response)

        def log_message(self, *args):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Fixed)
    server.daemon_threads = True
    port_out.put(server.server_address[1])
    server.serve_forever()


def start_floor(body: bytes) -> tuple[mp.Process, str]:
    """The reference server: a bare keep-alive http.server answering `body` to any GET."""
    port = mp.Queue()
    proc = mp.Process(target=_serve_floor, args=(body, port), daemon=True)
    proc.start()
    return proc, f"http://127.0.0.1:{port.get(timeout=30)}"


def request(conn, method, path, body=None, ctype="application/json"):
    """One request on a persistent connection; returns (status, body)."""
    headers = {"Content-Type": ctype} if body is not None else {}
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def _worker(url, kind, seconds, index, out):
    host = urlsplit(url)
    conn = http.client.HTTPConnection(host.hostname, host.port)
    base = "/api/v1/namespaces/default/pods"
    count, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        if kind == "get":
            status, _ = request(conn, "GET", f"{base}/pod-{count % 100}")
        elif kind == "patch":
            status, _ = request(conn, "PATCH", f"{base}/pod-{index}",
                                {"metadata": {"annotations": {"n": str(count)}}},
                                "application/merge-patch+json")
        else:
            status, _ = request(conn, "GET", f"{base}?fieldSelector=status.phase%3DPending")
        if status != 200:
            raise SystemExit(f"{kind}: HTTP {status}")
        count += 1
    out.put(count)


def run_clients(url, kind, seconds, clients) -> float:
    """Requests per second of `kind` from `clients` processes."""
    out = mp.Queue()
    procs = [mp.Process(target=_worker, args=(url, kind, seconds, i, out))
             for i in range(clients)]
    for p in procs:
        p.start()
    total = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def watch_fanout(url, watchers, events) -> float:
    """Events delivered per second to `watchers` watchers while one client writes `events`."""
    host = urlsplit(url)
    received = [0] * watchers
    path = "/api/v1/namespaces/default/pods?watch=true&resourceVersion="

    def watch(i, rv):
        conn = http.client.HTTPConnection(host.hostname, host.port)
        conn.request("GET", path + rv + "&timeoutSeconds=60")
        resp = conn.getresponse()
        while received[i] < events:
            if not resp.fp.readline():
                break
            received[i] += 1
        conn.close()

    conn = http.client.HTTPConnection(host.hostname, host.port)
    _, body = request(conn, "GET", "/api/v1/namespaces/default/pods?limit=1")
    rv = json.loads(body)["metadata"]["resourceVersion"]
    threads = [threading.Thread(target=watch, args=(i, rv), daemon=True) for i in range(watchers)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    start = time.monotonic()
    for n in range(events):
        request(conn, "PATCH", "/api/v1/namespaces/default/pods/pod-0",
                {"metadata": {"annotations": {"w": str(n)}}}, "application/merge-patch+json")
    for t in threads:
        t.join(timeout=60)
    return sum(received) / (time.monotonic() - start)


def official_client(url, seconds) -> float:
    """Requests per second of CoreV1Api.read_namespaced_pod from one thread (the official
    client's own cost included: this is what the node agent and control plane see)."""
    from kubernetes import client
    cfg = client.Configuration()
    cfg.host = url
    v1 = client.CoreV1Api(client.ApiClient(cfg))
    count, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        v1.read_namespaced_pod(f"pod-{count % 100}", "default")
        count += 1
    return count / seconds


def main() -> int:
    """Runs every figure and prints them."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--watchers", type=int, default=20)
    ap.add_argument("--events", type=int, default=500)
    args = ap.parse_args()
    proc, url = start_server()
    try:
        host = urlsplit(url)
        conn = http.client.HTTPConnection(host.hostname, host.port)
        for i in range(100):
            request(conn, "POST", "/api/v1/namespaces/default/pods",
                    dict(POD, metadata={"name": f"pod-{i}"}))
        print_machine()
        _, pod_bytes = request(conn, "GET", "/api/v1/namespaces/default/pods/pod-0")
        floor_proc, floor_url = start_floor(pod_bytes)
        try:
            floor = run_clients(floor_url, "get", args.seconds, args.clients)
        finally:
            floor_proc.terminate()
        figures = {"floor_get_per_s": round(floor)}
        print(f" floor: {figures['floor_get_per_s']:>7} req/s (bare http.server, same pod "
              f"bytes, {args.clients} keep-alive clients)", flush=True)
        for kind in ("get", "patch", "list"):
            figures[f"{kind}_per_s"] = round(run_clients(url, kind, args.seconds, args.clients))
            print(f"{kind:>6}: {figures[f'{kind}_per_s']:>7} req/s "
                  f"({args.clients} keep-alive clients)", flush=True)
            figures[f"{kind}_vs_floor"] = round(ratio(
                kind, figures[f"{kind}_per_s"], floor, "req/s", "req/s of the floor's GET"), 3)
        figures["client_get_per_s"] = round(official_client(url, args.seconds))
        print(f"client: {figures['client_get_per_s']:>7} req/s (official client, one thread, "
              "deserialising V1Pod)", flush=True)
        figures["client_vs_floor"] = round(ratio(
            "client", figures["client_get_per_s"], floor, "req/s", "req/s of the floor's GET"),
            3)
        figures["watch_events_per_s"] = round(watch_fanout(url, args.watchers, args.events))
        print(f" watch: {figures['watch_events_per_s']:>7} events/s delivered "
              f"({args.watchers} watchers, {args.events} writes)", flush=True)
        print(json.dumps(figures))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
