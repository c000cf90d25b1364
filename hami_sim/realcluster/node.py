"""Starts the real node of a RealCluster: containerd (our runtime wrapper as runc, the CNI
bridge), the local images, kubelet (cgroupfs, cgroup v1 accepted), then hami-node with
deploy/'s ServiceAccount, registered with kubelet as a device plugin over simulated GPUs."""
from __future__ import annotations

import ipaddress
import json
import os
import shlex
import sys
from pathlib import Path

from hami_common import constants as C
from hami_sim.demo.cluster import ClusterError, clean_base_env, control_nodes
from hami_sim.gpu import lib_dir
from hami_sim.realcluster import config as cfg
from hami_sim.realcluster.cluster import DEVICE_PLUGIN_DIR, free_port, wait_for
from hami_sim.realcluster.control_plane import NODE_SA, token_kubeconfig
from hami_sim.realcluster.images import PAUSE_IMAGE, import_images
from hami_sim.realcluster.reaper import CGROUP_FS, kill_cgroup

REPO = Path(__file__).resolve().parents[2]
HOST_USERLAND = ("/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/share",
                 "/etc/alternatives")


def start(c) -> None:
    """containerd, images, kubelet, hami-node; waits until the node offers the GPUs."""
    start_containerd(c)
    start_kubelet(c)
    if c.installed:
        from hami_sim.realcluster.installed import install
        install(c)
    elif c.dra:
        from hami_sim.realcluster.dra import start_dra_agent
        start_dra_agent(c)
    else:
        start_agent(c)


def host_mounts() -> list:
    """What the workload image takes from the host: its userland, the Python the project's
    virtual environment was made from, and the checkout holding that environment."""
    paths = list(HOST_USERLAND)
    for extra in (os.path.realpath(sys.base_prefix), str(REPO), os.path.realpath(sys.prefix)):
        if not any(extra == p or extra.startswith(p + "/") for p in paths):
            paths.append(extra)
    return paths


def runtime_wrapper(c, node_env: dict) -> Path:
    """The script containerd runs as runc (oci_runtime.py with this node's configuration)."""
    sim = {k: node_env[k] for k in ("HAMI_SIM_GPUS", "HAMI_SIM_STATE", "HAMI_SIM_UUID_SEED")
           if k in node_env}
    exports = {"HAMI_OCI_RUNC": c.bins["runc"], "HAMI_OCI_SIM_LIBS": str(lib_dir()),
               "HAMI_OCI_HOST_MOUNTS": ":".join(host_mounts()),
               "HAMI_OCI_SIM_ENV": json.dumps(sim)}
    if c.installed:
        from hami_sim.realcluster.installed import hosts_file
        exports["HAMI_OCI_HOSTS_FILE"] = str(hosts_file(c))
    script = c.root / "containerd" / "hami-runc"
    script.write_text("#!/bin/sh\n" + "".join(f"export {k}={shlex.quote(v)}\n"
                                              for k, v in exports.items())
                      + f"exec {shlex.quote(sys.executable)} -S "
                      f"{shlex.quote(str(Path(__file__).with_name('oci_runtime.py')))} \"$@\"\n")
    script.chmod(0o755)
    return script


def start_containerd(c) -> None:
    """containerd with its state in the work folder; imports the pause and workload images."""
    root = c.root / "containerd"
    (root / "net.d").mkdir(parents=True, exist_ok=True)
    (root / "net.d" / "10-hami-k8s.conflist").write_text(cfg.cni_config())
    c.node = c.new_node_agent()
    wrapper = runtime_wrapper(c, c.node.env)
    conf = root / "config.toml"
    if c.dra:      # there before containerd starts, which watches it for specs
        c.cdi_dir.mkdir(parents=True, exist_ok=True)
    conf.write_text(cfg.containerd_config(root, wrapper, PAUSE_IMAGE,
                                          c.cdi_dir if c.dra else None))
    env = clean_base_env()
    # containerd looks for its runc shim on PATH first: the one built beside it.
    env["PATH"] = f"{Path(c.bins['containerd']).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    proc = c.spawn("containerd", [c.bins["containerd"], "--config", str(conf)], env=env)
    wait_for("containerd", c.containerd_socket.exists, 30, c.logs / "containerd.log",
             lambda: proc.poll() is None)
    extra = []
    if c.installed:
        from hami_sim.realcluster.installed import extra_images
        extra = extra_images(c)
    import_images(str(c.containerd_socket), c.root / "images", extra)
    c.step("containerd running (runc through the simulated toolkit's wrapper; pause and "
           "workload images imported, no registry)")


def prepare_cgroups() -> None:
    """Our kubelet's cgroup root in every v1 hierarchy, emptied of what a crashed run left."""
    kill_cgroup(cfg.CGROUP_ROOT)
    for hierarchy in CGROUP_FS.iterdir():
        if hierarchy.is_dir() and not hierarchy.is_symlink() and \
                (hierarchy / "cgroup.procs").exists():
            (hierarchy / cfg.CGROUP_ROOT).mkdir(exist_ok=True)


def start_kubelet(c) -> None:
    """kubelet for node c.spec.name, on a clean slate; waits until the node is Ready."""
    if ipaddress.ip_address(c.node_ip).is_loopback:
        raise ClusterError("the node needs a non-loopback address as its InternalIP (kubelet "
                           "refuses 127.0.0.1; the API server reaches kubelet there for logs, "
                           "exec and port-forward), and this machine routes nowhere: give it "
                           "a network interface with a default route, then start again")
    prepare_cgroups()
    DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
    for stale in DEVICE_PLUGIN_DIR.iterdir():      # sockets and checkpoint of an earlier run
        if stale.is_socket() or stale.name == "kubelet_internal_checkpoint":
            stale.unlink()
    p = c.pki
    c.write_kubeconfig(c.root / "kubelet.kubeconfig", client_cert=str(p.crt("kubelet")),
                       client_key=str(p.key("kubelet")))
    c.ports.update(kubelet=free_port(), kubelet_healthz=free_port())
    cfg.write_json(c.root / "kubelet-config.yaml", cfg.kubelet_config(
        p, c.containerd_socket, c.ports["kubelet"], c.ports["kubelet_healthz"], c.pod_logs,
        c.feature_gates))
    spawn_kubelet(c)
    c.step(f"kubelet running; node {c.spec.name} Ready (cgroupfs, CNI bridge)")


def spawn_kubelet(c) -> None:
    """Starts kubelet with the configuration written by start_kubelet (also to restart it:
    containers keep running meanwhile); waits until the node is Ready."""
    proc = c.spawn("kubelet", [c.bins["kubelet"], f"--config={c.root / 'kubelet-config.yaml'}",
                               f"--kubeconfig={c.root / 'kubelet.kubeconfig'}",
                               f"--root-dir={c.root / 'kubelet'}",
                               f"--hostname-override={c.spec.name}",
                               f"--node-ip={c.node_ip}", "--v=2"])
    wait_for(f"node {c.spec.name} Ready", lambda: node_ready(c), 120,
             c.logs / "kubelet.log", lambda: proc.poll() is None)


def node_ready(c) -> bool:
    """Whether the node's Ready condition is True."""
    out = c.kubectl("get", "node", c.spec.name, "-o",
                    "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
    return out.strip() == "True"


def allocatable(c, resource: str = C.RESOURCE_GPU) -> int:
    """The node's allocatable count of resource (0 when absent)."""
    out = c.kubectl("get", "node", c.spec.name, "-o", "json", check=False)
    try:
        value = json.loads(out)["status"].get("allocatable", {}).get(resource, "0")
    except (ValueError, KeyError):
        return 0
    return int(value) if str(value).isdigit() else 0


def start_agent(c) -> None:
    """hami-node with deploy/'s ServiceAccount token; waits until kubelet offers every
    virtual GPU and hami-control sees the node."""
    c.node.install_shim()
    spawn_agent(c, token_kubeconfig(c, *NODE_SA))
    c.node.published(c.gpus()[c.spec.name], record_busy=False)
    c.step(f"hami-node registered with kubelet as a device plugin: "
           f"{c.spec.split * len(c.spec.gpus)} x {C.RESOURCE_GPU} over {len(c.spec.gpus)} "
           f"simulated GPUs, as ServiceAccount {NODE_SA[0]}/{NODE_SA[1]}")


def spawn_agent(c, kubeconfig) -> None:
    """Starts hami-node (also to restart it); waits for kubelet to offer every virtual GPU
    and hami-control to see them."""
    node = c.node
    # No /dev/nvidia* on a simulated node: the device nodes are the toolkit's business.
    node.start_agent(kubeconfig, ["--pass-device-specs", "false"])
    with open(c.pgid_file, "a") as f:
        f.write(f"{node.agent.pid}\n")
    node.read_ready_line()
    want = c.spec.split * len(c.spec.gpus)
    wait_for(f"kubelet offering {want} {C.RESOURCE_GPU}", lambda: allocatable(c) == want, 60,
             node.agent_log, node.alive)
    wait_for("hami-control seeing the node's GPUs",
             lambda: bool(c.gpus().get(c.spec.name)) and control_nodes(c.control) >= 1,
             60, node.agent_log, node.alive)
