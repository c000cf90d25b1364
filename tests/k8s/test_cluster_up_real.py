"""`hami-sim cluster up --real` as a user runs it: the README's command starts the real
cluster in the foreground; every command its hints print runs as printed and succeeds (a GPU
pod's output with `kubectl logs`, `kubectl exec` of hami-smi in a running GPU pod, ...); the
API server reaches kubelet at the node's InternalIP and verifies its serving certificate, so
`kubectl attach` and `kubectl port-forward` work too; Ctrl-C stops it all.

Its own cluster (the command's): conftest.py runs this module before the session's cluster.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import ssl
import time

import pytest
import yaml

from hami_sim.realcluster.cluster import free_port
from k8shelpers import (REPO, Background, check_gpu_pods_seen, http_get, pod, printed_commands,
                        run_all, run_printed, running)

pytestmark = pytest.mark.timeout(3600)
# The README's command. The tier runs as root already (conftest.py), so it runs without its
# `sudo` (which only makes a user root; our machines do not install it).
README_UP = "sudo .venv/bin/hami-sim cluster up --real"
START_TIMEOUT_S = 2400        # the machine lock (another session's cluster), then ~20 s


class CommandLine(Background):
    """`hami-sim cluster up --real` running in the foreground: what its hints printed."""

    def hints(self) -> str:
        """The hints block it printed."""
        out = self.output()
        return out[out.index("kubeconfig (admin):"):out.index("Component logs:")]

    def printed(self, label: str) -> str:
        """The value of a `label: value` line it printed."""
        return re.search(rf"^{re.escape(label)}: (\S+)", self.output(), re.M).group(1)


@pytest.fixture(scope="module")
def cluster_up():
    if os.geteuid() != 0:
        pytest.fail("tests/k8s runs kubelet and containerd, which need root; run `sudo make test`")
    readme = (REPO / "README.md").read_text()
    assert f"\n{README_UP} " in readme, f"the README no longer shows `{README_UP}`"
    cli = CommandLine(README_UP.removeprefix("sudo "))
    try:
        cli.wait_for("Dashboard (read-only):", START_TIMEOUT_S)
        yield cli
    finally:
        cli.stop(signal.SIGINT, timeout=180)


def test_every_command_its_hints_print_runs_as_printed(cluster_up):
    commands = printed_commands(cluster_up.hints())
    assert len(commands) >= 10, cluster_up.hints()
    check_gpu_pods_seen(run_all(commands))


def test_the_dashboard_it_prints_answers(cluster_up):
    snapshot = json.loads(http_get(cluster_up.printed("Dashboard (read-only)") + "api/snapshot"))
    assert [n["name"] for n in snapshot["nodes"]] == ["node-a"]


def test_the_api_server_reaches_kubelet_at_the_internal_ip_and_verifies_it(cluster_up):
    kubeconfig = cluster_up.printed("kubeconfig (admin)")
    node = json.loads(run_printed(f"{cluster_up.printed('kubectl')} --kubeconfig {kubeconfig} "
                                  "get node node-a -o json"))
    (ip,) = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    assert not ipaddress.ip_address(ip).is_loopback
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    with open(kubeconfig) as f:
        ca = yaml.safe_load(f)["clusters"][0]["cluster"]["certificate-authority"]
    # kubelet's serving certificate holds for that address under the cluster's CA, the CA the
    # API server is given to verify it with.
    context = ssl.create_default_context(cafile=ca)
    with socket.create_connection((ip, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=ip) as tls:
        assert tls.getpeercert()["subject"] == ((("commonName", "node-a"),),)
    args = open(f"/proc/{apiserver_pid(kubeconfig)}/cmdline").read().split("\0")
    assert f"--kubelet-certificate-authority={ca}" in args
    assert "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname" in args


def apiserver_pid(kubeconfig: str) -> int:
    """The pid of the kube-apiserver serving that kubeconfig's port."""
    with open(kubeconfig) as f:
        server = yaml.safe_load(f)["clusters"][0]["cluster"]["server"]
    port = server.rsplit(":", 1)[1]
    for entry in os.listdir("/proc"):
        try:
            args = open(f"/proc/{entry}/cmdline").read().split("\0")
        except OSError:
            continue
        if args[0].endswith("kube-apiserver") and f"--secure-port={port}" in args:
            return int(entry)
    raise AssertionError(f"no kube-apiserver with --secure-port={port}")


def test_attach_and_port_forward_reach_a_running_pod(cluster_up):
    """An HTTP server in a pod: its port forwarded to this machine answers, and each request
    it logs shows up on an attached `kubectl attach`."""
    k = f"{cluster_up.printed('kubectl')} --kubeconfig {cluster_up.printed('kubeconfig (admin)')}"
    body = pod("web", {}, ["python3", "-u", "-m", "http.server", "8080"])
    body["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 8080},
                                                       "periodSeconds": 1}
    run_printed(f"{k} apply -f -", stdin=json.dumps(body))
    try:
        run_printed(f"{k} wait --for=condition=Ready pod/web --timeout=120s")
        port = free_port()
        with running(f"{k} port-forward pod/web {port}:8080", "Forwarding from") as forward, \
                running(f"{k} attach web", "") as attach:
            deadline = time.monotonic() + 30
            while "GET /?attached" not in attach.output():
                assert "Directory listing" in http_get(f"http://127.0.0.1:{port}/?attached")
                assert time.monotonic() < deadline, f"nothing on `kubectl attach`:\n" \
                                                    f"{attach.output()}"
                time.sleep(0.5)
            assert "Handling connection" in forward.output()
    finally:
        run_printed(f"{k} delete pod web --now")


def test_ctrl_c_stops_everything(cluster_up):
    code = cluster_up.stop(signal.SIGINT, timeout=180)
    assert code == 0, cluster_up.output()[-3000:]
    assert "stopped: everything `cluster up` started has been stopped" in cluster_up.output()
