"""Helpers of the node-agent tier (tests/node): hami-node as a real process against the
simulated GPU, the API server double and the kubelet double. The scheduler's part (annotations,
node lock, binding) is played by `Scheduler`, with the hami_common codecs, as hami-control
writes them. A module of its own (not conftest.py), so that `from nodehelpers import ...` finds
it whichever other tiers' conftest.py files pytest loaded first."""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from hami_common import constants as C
from hami_common import node_lock, node_register, pod_devices
from hami_common.pod_devices import ContainerDevice
from hami_node.shim import lib_path
from hami_sim.gpu import sim_env
from hami_sim.launch import (read_first_line, short_tempdir, start_apiserver, start_kubelet,
                             stop_process)
from hami_sim.testing import pod_manifest, wait_for  # noqa: F401 (the tier's polling helper)

NODE = "node-1"
GPUS = "16g/108/NVIDIA A100-SXM4-40GB,15g/40/Tesla T4"
SPLIT = 4
READY_TIMEOUT_S = 30.0


def samples(text, name):
    """(labels, value) of every sample of one metric in a /metrics text."""
    from prometheus_client.parser import text_string_to_metric_families
    return [(s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]


def install_shim(shim_dir: Path) -> None:
    """`hami-node install-shim` of the built libvgpu.so into shim_dir, as the DaemonSet's init
    container does."""
    subprocess.run([sys.executable, "-m", "hami_node.plugin.cli", "install-shim",
                    "--source", str(lib_path()), "--shim-host-dir", str(shim_dir)],
                   check=True, capture_output=True, timeout=30)


class NodeProcess:
    """A running `hami-node` (own session); stderr goes to a log file."""

    def __init__(self, args, env, log_path: Path):
        self.args, self.env, self.log_path = list(args), dict(env), log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "hami_node.plugin.cli", *self.args],
                                     stdout=subprocess.PIPE, stderr=self._log, env=self.env,
                                     start_new_session=True, text=True)
        self.socket = self.metrics_url = None

    def wait_ready(self, timeout=READY_TIMEOUT_S) -> "NodeProcess":
        """Waits for the `ready socket=... metrics=...` line."""
        line = read_first_line(self.proc, timeout)
        if not line.startswith("ready "):
            self.stop()
            raise AssertionError(f"hami-node did not start: {line!r}\n{self.log()}")
        fields = dict(part.split("=", 1) for part in line.split()[1:])
        self.socket, self.metrics_url = fields["socket"], fields["metrics"]
        return self

    def log(self) -> str:
        """Everything it wrote on stderr so far."""
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> str:
        """One /metrics scrape."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as resp:
            return resp.read().decode()

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM (then SIGKILL); the exit status."""
        stop_process(self.proc)
        self._log.close()
        return self.proc.returncode


class Node:
    """Everything one simulated node needs to run hami-node."""

    def __init__(self, apiserver, plugin_dir: Path, workdir: Path, name: str = NODE):
        self.apiserver, self.plugin_dir, self.workdir, self.name = apiserver, plugin_dir, \
            workdir, name
        self.shim_dir = workdir / "vgpu"
        self.state_dir = workdir / "gpu-state"
        # Contexts and modules free: this tier checks the node agent's figures exactly; the
        # driver's realistic context costs are tested in tests/shim and tests/sim.
        self.env = sim_env(gpus=GPUS, state_dir=self.state_dir, uuid_seed=name,
                           ctx_overhead="0", module_memory="0")
        install_shim(self.shim_dir)
        self.processes = []

    def args(self, *extra) -> list:
        """hami-node's flags for this node (fast intervals for tests)."""
        return ["--node-name", self.name, "--device-plugin-dir", str(self.plugin_dir),
                "--kubeconfig", str(self.apiserver.kubeconfig),
                "--shim-host-dir", str(self.shim_dir), "--metrics-address", "127.0.0.1:0",
                "--device-split-count", str(SPLIT), "--annotation-interval", "0.5",
                "--health-recovery-seconds", "1.5", *extra]

    def start(self, *extra, env=None, ready=True) -> NodeProcess:
        """Starts hami-node (and waits for it to serve)."""
        proc = NodeProcess(self.args(*extra), dict(self.env, **(env or {})),
                           self.workdir / f"hami-node-{len(self.processes)}.log")
        self.processes.append(proc)
        return proc.wait_ready() if ready else proc

    def stop_all(self) -> None:
        """Stops every hami-node this node started."""
        for proc in self.processes:
            proc.stop()

    def uuids(self) -> list:
        """The simulated GPUs' UUIDs, in index order."""
        code = ("import pynvml as n; n.nvmlInit(); print(','.join(n.nvmlDeviceGetUUID("
                "n.nvmlDeviceGetHandleByIndex(i)) for i in range(n.nvmlDeviceGetCount())))")
        out = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True,
                             text=True, check=True, timeout=30).stdout
        return out.strip().split(",")


class Scheduler:
    """What hami-control does for a pod: node lock, annotations, binding."""

    def __init__(self, core_v1, node: str = NODE):
        self.v1, self.node = core_v1, node

    @staticmethod
    def container(name, gpus=1, extra_limits=None, **spec):
        """A container spec asking for `gpus` GPUs (0: none)."""
        limits = {C.RESOURCE_GPU: str(gpus)} if gpus else {}
        limits.update(extra_limits or {})
        return {"name": name, "image": "busybox:1.36", "command": ["true"],
                "resources": {"limits": limits} if limits else {}, **spec}

    def create(self, name, containers, init_containers=(), namespace="default") -> dict:
        """Creates the pod (pending, unscheduled)."""
        body = pod_manifest(name, list(containers))
        body["spec"]["schedulerName"] = C.SCHEDULER_NAME
        if init_containers:
            body["spec"]["initContainers"] = list(init_containers)
        resp = self.v1.create_namespaced_pod(namespace, body, _preload_content=False)
        return json.loads(resp.data)

    def lock(self, name, namespace="default", when=None) -> None:
        """Takes the node lock for the pod."""
        value = node_lock.encode(node_lock.NodeLock(when or datetime.now(timezone.utc),
                                                    namespace, name))
        self.v1.patch_node(self.node, {"metadata": {"annotations": {C.ANNO_NODE_LOCK: value}}})

    def acquire_lock(self, name, namespace="default", timeout=10.0) -> None:
        """Waits until the node lock is free (or ours), then takes it; as the scheduler does,
        a compare-and-swap on the node's resourceVersion."""
        from kubernetes.client.rest import ApiException
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            node = json.loads(self.v1.read_node(self.node, _preload_content=False).data)
            held = (node["metadata"].get("annotations") or {}).get(C.ANNO_NODE_LOCK)
            if held and node_lock.decode(held).pod != name:
                time.sleep(0.02)
                continue
            value = node_lock.encode(node_lock.NodeLock(datetime.now(timezone.utc),
                                                        namespace, name))
            try:
                self.v1.patch_node(self.node, {"metadata": {
                    "resourceVersion": node["metadata"]["resourceVersion"],
                    "annotations": {C.ANNO_NODE_LOCK: value}}},
                    _content_type="application/merge-patch+json")
                return
            except ApiException as e:
                if e.status != 409:
                    raise
        raise AssertionError(f"the node lock stayed taken for {timeout}s")

    def annotate(self, name, devices, namespace="default", bind_time=None, raw=None) -> None:
        """Writes the scheduler's pod annotations; devices: per container, [(uuid, mem, cores)]."""
        value = raw if raw is not None else pod_devices.encode(
            [[ContainerDevice(u, m, c) for u, m, c in ctr] for ctr in devices])
        now = str(int(bind_time if bind_time is not None else time.time()))
        self.v1.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {
            C.ANNO_VGPU_NODE: self.node, C.ANNO_VGPU_TIME: now,
            C.ANNO_DEVICES_TO_ALLOCATE: value, C.ANNO_DEVICES_ALLOCATED: value,
            C.ANNO_BIND_PHASE: C.BIND_PHASE_ALLOCATING, C.ANNO_BIND_TIME: now}}})

    def bind(self, name, namespace="default") -> None:
        """Binds the pod to the node."""
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}}
        resp = self.v1.create_namespaced_binding(namespace, body, _preload_content=False)
        assert resp.status == 201

    def schedule(self, name, devices, containers=None, init_containers=(), lock=True,
                 bind_time=None, raw=None, namespace="default") -> None:
        """Create (unless containers is None: the pod exists), lock, annotate, bind."""
        if containers is not None:
            self.create(name, containers, init_containers, namespace)
        if lock:
            self.lock(name, namespace)
        self.annotate(name, devices, namespace, bind_time=bind_time, raw=raw)
        self.bind(name, namespace)

    def pod_annotations(self, name, namespace="default") -> dict:
        """The pod's annotations now."""
        resp = self.v1.read_namespaced_pod(name, namespace, _preload_content=False)
        return json.loads(resp.data)["metadata"].get("annotations") or {}

    def node_annotations(self) -> dict:
        """The node's annotations now."""
        resp = self.v1.read_node(self.node, _preload_content=False)
        return json.loads(resp.data)["metadata"].get("annotations") or {}

    def registered(self) -> list:
        """The node's register annotation, decoded."""
        return node_register.decode(self.node_annotations().get(C.ANNO_NODE_REGISTER, ""))

    def delete(self, *names, namespace="default") -> None:
        """Deletes pods (ignoring those already gone)."""
        for name in names:
            try:
                self.v1.delete_namespaced_pod(name, namespace, _preload_content=False)
            except Exception as e:  # noqa: BLE001 cleanup must go on
                if getattr(e, "status", None) != 404:
                    raise


@contextlib.contextmanager
def simulated_node(workdir: Path):
    """API server double, kubelet double (in-process) and a Node for hami-node; all stopped
    on exit, also when the test fails."""
    api = start_apiserver(workdir=workdir / "apiserver", nodes=[NODE])
    plugin_dir = short_tempdir()
    kubelet = node = None
    try:
        kubelet = start_kubelet(NODE, plugin_dir, api, record_dir=workdir / "records",
                                sync_interval=0.1, retry_base=0.2, retry_max=1.0,
                                log=lambda msg: None)
        node = Node(api, plugin_dir, workdir)
        from kubernetes import client as k8s
        yield node, kubelet, Scheduler(k8s.CoreV1Api(api.api_client()))
    finally:
        if node:
            node.stop_all()
        if kubelet:
            kubelet.stop()
        api.stop()
        shutil.rmtree(plugin_dir, ignore_errors=True)

