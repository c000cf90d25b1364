"""Service routing for the real cluster's installed mode: an emulation of kube-proxy and cluster
DNS, neither of which the one-machine cluster runs.

Pods reach the API server (in-cluster configuration: the `kubernetes` Service's ClusterIP)
and kube-scheduler in hami-control's pod reaches the extender by the name of the
`hami-control-leader` Service; the API server reaches the webhook through the `hami-control`
Service (it dials the ClusterIP). This process, on the host:

- makes the whole Service range local (`ip route add local RANGE dev lo`), so that a
  ClusterIP is an address of the host that pods reach through the CNI bridge's gateway;
- listens on each Service's ClusterIP and port and forwards every TCP connection to one of
  the Service's ready endpoints (its EndpointSlices, refreshed twice a second), or for
  `default/kubernetes` to the API server on loopback: kube-proxy's old userspace mode;
- writes a hosts file (`<ClusterIP> <name>.<namespace>.svc ...`) that the runtime wrapper
  (oci_runtime.py) appends to each pod's /etc/hosts: the names cluster DNS would answer.

Established connections stay with their endpoint, as with kube-proxy's conntrack; a connection
made after an endpoint changed goes to the new one.

    python -m hami_sim.realcluster.svcproxy --kubeconfig K --api-port P --hosts-file F
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

REFRESH_S = 0.5
CONNECT_TIMEOUT_S = 3.0


class Table:
    """(ClusterIP, port) -> the endpoints (address, port) connections go to, kept fresh."""

    def __init__(self):
        self.lock = threading.Lock()
        self.routes: dict = {}
        self.turn = itertools.count()

    def pick(self, key) -> list:
        """The endpoints of a Service port, rotated so that connections spread."""
        with self.lock:
            found = list(self.routes.get(key, ()))
        if not found:
            return []
        k = next(self.turn) % len(found)
        return found[k:] + found[:k]


def routes_of(services: list, slices: list, api_port: int) -> dict:
    """(ClusterIP, port) -> ready endpoints, from Service and EndpointSlice objects."""
    ready: dict = {}
    for s in slices:
        meta = s["metadata"]
        owner = (meta.get("labels") or {}).get("kubernetes.io/service-name")
        addresses = [a for e in s.get("endpoints") or []
                     if (e.get("conditions") or {}).get("ready", True)
                     for a in e.get("addresses") or []]
        for p in s.get("ports") or []:
            ready.setdefault((meta["namespace"], owner, p.get("name") or ""), []).extend(
                (a, p["port"]) for a in addresses)
    routes = {}
    for svc in services:
        meta, spec = svc["metadata"], svc.get("spec") or {}
        ip = spec.get("clusterIP")
        if not ip or ip == "None":
            continue
        for port in spec.get("ports") or []:
            if (meta["namespace"], meta["name"]) == ("default", "kubernetes"):
                routes[(ip, port["port"])] = [("127.0.0.1", api_port)]
            else:
                routes[(ip, port["port"])] = ready.get(
                    (meta["namespace"], meta["name"], port.get("name") or ""), [])
    return routes


def hosts_lines(services: list) -> str:
    """What cluster DNS would answer for each Service, as /etc/hosts lines."""
    lines = []
    for svc in services:
        meta, ip = svc["metadata"], (svc.get("spec") or {}).get("clusterIP")
        if ip and ip != "None":
            name = f"{meta['name']}.{meta['namespace']}.svc"
            lines.append(f"{ip} {name} {name}.cluster.local")
    return "".join(line + "\n" for line in sorted(lines))


def pump(src: socket.socket, dst: socket.socket) -> None:
    """Copies src to dst until either end closes; then closes both."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def forward(client: socket.socket, endpoints: list) -> None:
    """Connects client to the first endpoint that answers (closes it when none does)."""
    for address in endpoints:
        try:
            upstream = socket.create_connection(address, timeout=CONNECT_TIMEOUT_S)
        except OSError:
            continue
        upstream.settimeout(None)
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)
        return
    client.close()


def listen(table: Table, key) -> None:
    """Listens on a ClusterIP and port; a thread accepts for as long as the process runs."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(key)
    server.listen(128)
    threading.Thread(target=accept, args=(table, key, server), daemon=True).start()


def accept(table: Table, key, server: socket.socket) -> None:
    while True:
        client, _ = server.accept()
        threading.Thread(target=forward, args=(client, table.pick(key)), daemon=True).start()


def route_local(service_range: str, add: bool) -> None:
    """Makes the Service range local to the host (or undoes it)."""
    args = ["replace", "local", service_range, "dev", "lo", "table", "local"] if add else \
        ["del", "local", service_range, "dev", "lo", "table", "local"]
    done = subprocess.run(["ip", "route", *args], capture_output=True, text=True)
    if add and done.returncode != 0:
        raise SystemExit(f"svcproxy: ip route {' '.join(args)} failed: {done.stderr.strip()}")


def write_atomic(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="svcproxy", description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--api-port", type=int, required=True)
    p.add_argument("--hosts-file", required=True)
    p.add_argument("--service-range", required=True)
    args = p.parse_args(argv)
    from kubernetes import client, config
    api = config.new_client_from_config(config_file=args.kubeconfig)
    v1, discovery = client.CoreV1Api(api), client.DiscoveryV1Api(api)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    route_local(args.service_range, add=True)
    table, listening = Table(), set()
    try:
        print("ready", flush=True)
        while True:
            try:
                services = json.loads(v1.list_service_for_all_namespaces(
                    _preload_content=False).data)["items"]
                slices = json.loads(discovery.list_endpoint_slice_for_all_namespaces(
                    _preload_content=False).data)["items"]
            except Exception as e:  # noqa: BLE001 - a moment without the API: keep routing
                print(f"svcproxy: listing Services failed ({e}); routes kept", flush=True)
                time.sleep(REFRESH_S)
                continue
            routes = routes_of(services, slices, args.api_port)
            with table.lock:
                table.routes = routes
            for key in routes.keys() - listening:
                listen(table, key)
                listening.add(key)
            write_atomic(args.hosts_file, hosts_lines(services))
            time.sleep(REFRESH_S)
    finally:
        route_local(args.service_range, add=False)


if __name__ == "__main__":
    sys.exit(main())
