"""The real cluster's DRA mode (`RealCluster(dra=True)`): the DRAConsumableCapacity gate in
kube-apiserver, kube-controller-manager, both kube-schedulers and kubelet; containerd 1.7 built
from its module with CDI on (its spec folder in the work folder); deploy/'s DeviceClass and
admission policy; and hami-node as a DRA kubelet plugin (kubeletPlugin: dra) under kubelet's
root folder, with a ServiceAccount token bound to the Node (as a DaemonSet pod's token is:
it names the node, which deploy/'s admission policy checks)."""
from __future__ import annotations

import json

from hami_common.constants import DRA_DRIVER
from hami_sim.realcluster import config as cfg

DRA_GATES = {"DRAConsumableCapacity": True}
NODE_SA = ("kube-system", "hami-node")
SLICE_TIMEOUT_S = 60.0


def dra_objects() -> list:
    """deploy/hami-dra.yaml: the DeviceClass, the admission policy and its binding."""
    return cfg.deploy_docs("hami-dra.yaml")


def node_token_kubeconfig(c):
    """hami-node's kubeconfig with a token bound to this Node (it carries the node's name)."""
    token = c.kubectl("create", "token", NODE_SA[1], "-n", NODE_SA[0], "--duration=24h",
                      "--bound-object-kind=Node", f"--bound-object-name={c.spec.name}",
                      "--bound-object-uid=" + node_uid(c)).strip()
    return c.write_kubeconfig(c.root / "hami-node.kubeconfig", token=token,
                              namespace=NODE_SA[0])


def node_uid(c) -> str:
    """The Node object's UID."""
    return c.kubectl("get", "node", c.spec.name, "-o", "jsonpath={.metadata.uid}").strip()


def agent_args(c) -> list:
    """hami-node's flags for the DRA mode on this cluster."""
    return ["--kubelet-plugin", "dra", "--kubelet-root-dir", str(c.root / "kubelet"),
            "--cdi-spec-dir", str(c.cdi_dir), "--pass-device-specs", "false"]


def node_slice(c):
    """The node's ResourceSlice of our driver as JSON, or None."""
    out = c.kubectl("get", "resourceslices", "-o", "json",
                    f"--field-selector=spec.nodeName={c.spec.name},spec.driver={DRA_DRIVER}",
                    check=False)
    try:
        items = json.loads(out).get("items") or []
    except ValueError:
        return None
    return items[0] if items else None


def slice_ready(c, shareable: bool) -> bool:
    """Whether the node's slice lists every GPU, shareable or whole as asked."""
    doc = node_slice(c)
    devices = ((doc or {}).get("spec") or {}).get("devices") or []
    return len(devices) == len(c.spec.gpus) and \
        all(bool(d.get("allowMultipleAllocations")) == shareable for d in devices)


def start_dra_agent(c) -> None:
    """deploy/'s DRA objects, then hami-node as a DRA kubelet plugin; waits for its slice."""
    c.apply(dra_objects())
    c.node.install_shim()
    spawn_dra_agent(c, node_token_kubeconfig(c))
    c.step(f"hami-node registered with kubelet as DRA driver {DRA_DRIVER}: a ResourceSlice "
           f"of {len(c.spec.gpus)} shareable GPUs, CDI specs in {c.cdi_dir}")


def spawn_dra_agent(c, kubeconfig) -> None:
    """Starts hami-node in DRA mode (also to restart it); waits for the node's slice."""
    from hami_sim.realcluster.cluster import wait_for
    node = c.node
    node.start_agent(kubeconfig, agent_args(c))
    with open(c.pgid_file, "a") as f:
        f.write(f"{node.agent.pid}\n")
    node.read_ready_line()
    shareable = bool(c.feature_gates.get("DRAConsumableCapacity"))
    wait_for(f"the node's ResourceSlice ({'shareable' if shareable else 'whole'} GPUs)",
             lambda: slice_ready(c, shareable), SLICE_TIMEOUT_S, node.agent_log, node.alive)


def set_consumable_gate(c, on: bool) -> None:
    """Restarts kube-apiserver, kube-controller-manager, both kube-schedulers and kubelet with
    DRAConsumableCapacity on or off (etcd, containerd, hami-control and hami-node keep
    running; kubelet wipes the node's slices as it starts, and hami-node writes them again)."""
    from hami_sim.realcluster import control_plane
    from hami_sim.realcluster.node import spawn_kubelet
    c.feature_gates = {**c.feature_gates, "DRAConsumableCapacity": on}
    for name in ("kube-scheduler", "default-scheduler", "kube-controller-manager",
                 "kube-apiserver"):
        c.stop_component(name)
    control_plane.start_apiserver(c)
    control_plane.start_controller_manager(c)
    control_plane.start_schedulers(c)
    c.stop_component("kubelet")
    cfg.write_json(c.root / "kubelet-config.yaml", {
        **json.loads((c.root / "kubelet-config.yaml").read_text()),
        "featureGates": dict(c.feature_gates)})
    spawn_kubelet(c)
    c.step(f"DRAConsumableCapacity {'on' if on else 'off'} in kube-apiserver, "
           "kube-controller-manager, kube-scheduler and kubelet (restarted)")
