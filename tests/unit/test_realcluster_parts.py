"""Pieces of the real cluster's installed mode that run without root: svcproxy's routing
table, its forwarding (real sockets on loopback), and the runtime wrapper's spec edits."""
import socket
import threading

from hami_sim.realcluster import oci_runtime, svcproxy


def service(ns, name, ip, port_name="https"):
    return {"metadata": {"namespace": ns, "name": name},
            "spec": {"clusterIP": ip, "ports": [{"name": port_name, "port": 443}]}}


def endpoint_slice(ns, owner, ready: dict, port=9443, port_name="https"):
    return {"metadata": {"namespace": ns, "labels": {"kubernetes.io/service-name": owner}},
            "ports": [{"name": port_name, "port": port}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": r}}
                          for a, r in ready.items()]}


def test_routes_go_to_ready_endpoints_and_the_api_service_to_loopback():
    services = [service("default", "kubernetes", "10.96.0.1"),
                service("hami-system", "hami-control", "10.96.1.1"),
                service("hami-system", "hami-control-leader", "10.96.1.2"),
                {"metadata": {"namespace": "x", "name": "headless"},
                 "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}]
    slices = [endpoint_slice("hami-system", "hami-control",
                             {"10.88.0.5": True, "10.88.0.6": False}),
              endpoint_slice("hami-system", "hami-control-leader", {"10.88.0.6": False})]
    routes = svcproxy.routes_of(services, slices, api_port=6443)
    assert routes == {("10.96.0.1", 443): [("127.0.0.1", 6443)],
                      ("10.96.1.1", 443): [("10.88.0.5", 9443)],
                      ("10.96.1.2", 443): []}
    hosts = svcproxy.hosts_lines(services).splitlines()
    assert "10.96.1.2 hami-control-leader.hami-system.svc " \
           "hami-control-leader.hami-system.svc.cluster.local" in hosts
    assert len(hosts) == 3


def echo_server():
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(1024):
                conn.sendall(b"echo:" + data)
    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_connection_is_forwarded_to_an_endpoint_that_answers():
    upstream = echo_server()
    dead = ("127.0.0.1", free_port())          # nothing listens: the next endpoint is tried
    key = ("127.0.0.1", free_port())
    table = svcproxy.Table()
    table.routes = {key: [dead, upstream]}
    table.turn = iter(lambda: 0, 1)            # always from the first endpoint
    svcproxy.listen(table, key)
    with socket.create_connection(key, timeout=5) as client:
        client.sendall(b"hello")
        assert client.recv(1024) == b"echo:hello"


def test_a_service_without_ready_endpoints_closes_the_connection():
    key = ("127.0.0.1", free_port())
    table = svcproxy.Table()
    table.routes = {key: []}
    svcproxy.listen(table, key)
    with socket.create_connection(key, timeout=5) as client:
        assert client.recv(1024) == b""


def spec(hosts_file=None, sandbox=False):
    mounts = [{"destination": "/etc/hosts", "source": str(hosts_file)}] if hosts_file else []
    annotations = {"io.kubernetes.cri.container-type": "sandbox" if sandbox else "container"}
    return {"annotations": annotations, "mounts": mounts,
            "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}]},
            "process": {"env": ["PATH=/bin"]}}


def test_only_the_project_image_gets_the_host_userland(tmp_path):
    skeleton, plain = tmp_path / "skeleton", tmp_path / "plain"
    skeleton.mkdir()
    plain.mkdir()
    (skeleton / oci_runtime.HOST_USERLAND_MARK).write_text("")
    host = [str(tmp_path)]
    mounted = oci_runtime.edit(spec(), "/libs", host, {}, str(skeleton))
    assert [m["destination"] for m in mounted["mounts"]] == [str(tmp_path)]
    untouched = oci_runtime.edit(spec(), "/libs", host, {}, str(plain))
    assert untouched["mounts"] == []


def test_service_names_are_appended_once_to_the_pods_hosts_file(tmp_path):
    names = tmp_path / "service-hosts"
    names.write_text("10.96.1.2 hami-control-leader.hami-system.svc\n")
    pod_hosts = tmp_path / "etc-hosts"
    pod_hosts.write_text("127.0.0.1 localhost\n")
    for _ in range(2):                     # two containers of one pod
        oci_runtime.edit(spec(pod_hosts), "/libs", [], {}, str(tmp_path), str(names))
    assert pod_hosts.read_text() == ("127.0.0.1 localhost\n" + oci_runtime.HOSTS_MARK +
                                     "10.96.1.2 hami-control-leader.hami-system.svc\n")
    sandbox_hosts = tmp_path / "sandbox-hosts"
    sandbox_hosts.write_text("")
    oci_runtime.edit(spec(sandbox_hosts, sandbox=True), "/libs", [], {}, "", str(names))
    assert sandbox_hosts.read_text() == ""


def test_kubelets_serving_certificate_follows_the_nodes_address(tmp_path):
    """Signed for the node's name and InternalIP; made again when the address changes (a kept
    work folder on a machine whose address moved), kept otherwise."""
    import subprocess
    from hami_sim.realcluster.pki import make_pki

    def sans(pki):
        out = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in",
                              str(pki.crt("kubelet-serving"))], capture_output=True, text=True,
                             check=True).stdout
        return {v.split(":", 1)[1] for v in out.splitlines()[1].strip().split(", ")}

    pki = make_pki(tmp_path, "node-a", "192.0.2.7")
    assert sans(pki) == {"node-a", "localhost", "192.0.2.7", "127.0.0.1"}
    before = pki.crt("kubelet-serving").read_bytes()
    assert make_pki(tmp_path, "node-a", "192.0.2.7").crt("kubelet-serving").read_bytes() == before
    assert "198.51.100.3" in sans(make_pki(tmp_path, "node-a", "198.51.100.3"))


def test_the_hints_commands_name_files_of_the_checkout():
    """Every file a hinted command applies is in the repository (they run from its folder)."""
    from pathlib import Path
    from types import SimpleNamespace
    from hami_sim.realcluster.cli import hint_commands
    repo = Path(__file__).resolve().parents[2]
    for installed in (False, True):
        cluster = SimpleNamespace(bins={"kubectl": "/k/kubectl"}, installed=installed)
        commands = hint_commands(cluster, Path("/k/admin.kubeconfig"))
        assert all(c.startswith("/k/kubectl --kubeconfig /k/admin.kubeconfig ") for c in commands)
        files = [c.split(" -f ")[1].split()[0] for c in commands if " -f " in c]
        assert files and all((repo / f).is_file() for f in files), files
        assert any("port-forward" in c for c in commands) == installed


def test_the_volume_mounts_device_list_selects_the_gpus(tmp_path):
    spec = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"]},
            "mounts": [{"destination": "/var/run/nvidia-container-devices/GPU-b",
                        "source": "/dev/null"},
                       {"destination": "/usr/local/vgpu/shared", "source": "/x"},
                       {"destination": "/var/run/nvidia-container-devices/GPU-a",
                        "source": "/dev/null"}]}
    edited = oci_runtime.edit(spec, "/sim/lib", [], {"HAMI_SIM_GPUS": "x"}, str(tmp_path))
    env = dict(e.split("=", 1) for e in edited["process"]["env"])
    assert env["HAMI_SIM_VISIBLE_DEVICES"] == "GPU-b,GPU-a"
    assert oci_runtime.visible_devices("GPU-c", []) == "GPU-c"


def test_the_dra_cluster_turns_cdi_and_the_gate_on():
    from pathlib import Path
    from hami_sim.realcluster import config
    text = config.containerd_config(Path("/r"), Path("/w"), "pause", Path("/r/cdi"))
    assert 'enable_cdi = true\n  cdi_spec_dirs = ["/r/cdi"]' in text
    assert "enable_cdi = false" in config.containerd_config(Path("/r"), Path("/w"), "pause")
    assert config.gate_args({"DRAConsumableCapacity": True, "B": False}) == [
        "--feature-gates=B=false,DRAConsumableCapacity=true"]
    assert config.gate_args({}) == []
