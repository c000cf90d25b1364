"""The installed mode of the real cluster (`hami-sim cluster up --real --install helm`):
hami-control and hami-node run as the chart's Deployment and DaemonSet (init container,
hostPath mounts, probes, ServiceAccounts and all), installed with `helm install` of
charts/hami-py by the real helm, from the project's image imported into containerd.

What the one-machine cluster lacks, it emulates: Service routing and Service names
(svcproxy.py, for kube-proxy and cluster DNS) and the GPU driver (the runtime wrapper mounts
the simulated one into containers that ask for GPUs, as the NVIDIA toolkit mounts the real
one; hami-node's DaemonSet asks for all of them, as on a real node)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hami_common import constants as C
from hami_sim.demo.cluster import ClusterError
from hami_sim.realcluster.cluster import wait_for
from hami_sim.realcluster.components import versions
from hami_sim.realcluster.images import (BULLSEYE_IMAGE, SCHEDULER_IMAGE, rootfs_archive,
                                         scheduler_archive)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "hami-py"
RELEASE, NAMESPACE = "hami", "hami-system"
NODE_LABEL = ("gpu", "on")              # the chart's default devicePlugin.nodeSelector
INSTALL_TIMEOUT_S = 180.0
DASHBOARD_PORT = 9445                   # the chart's control.dashboard.port
NODE_METRICS_PORT = 9394                # hami-node's metrics in the chart's DaemonSet


def scheduler_image() -> str:
    """kube-scheduler's image tag (the cluster's own version)."""
    return SCHEDULER_IMAGE.format(version="v" + versions()["K8S_VERSION"])


def bullseye_rootfs() -> str:
    """The cached Debian bullseye root filesystem (glibc 2.31), made by tools/rootfs/build.sh."""
    done = subprocess.run(["bash", str(REPO / "tools/rootfs/build.sh"), "bullseye"],
                          stdout=subprocess.PIPE, text=True, timeout=1800)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ClusterError("tools/rootfs/build.sh bullseye failed (see above)")
    return lines[-1]


def extra_images(c) -> list:
    """The images the installed mode adds to the node's: kube-scheduler's and bullseye."""
    rootfs = bullseye_rootfs()
    return [lambda w: scheduler_archive(w, c.bins["kube-scheduler"], scheduler_image()),
            lambda w: rootfs_archive(w, rootfs, BULLSEYE_IMAGE)]


def hosts_file(c) -> Path:
    """The Service names svcproxy writes for the pods' /etc/hosts."""
    return c.root / "service-hosts"


def start_service_proxy(c, service_range: str) -> None:
    """svcproxy (Service routing and names, see its doc), until the cluster stops."""
    proc = c.spawn("svcproxy", [sys.executable, "-m", "hami_sim.realcluster.svcproxy",
                                "--kubeconfig", str(c.kubeconfig),
                                "--api-port", str(c.ports["apiserver"]),
                                "--hosts-file", str(hosts_file(c)),
                                "--service-range", service_range])
    wait_for("svcproxy", hosts_file(c).exists, 30, c.logs / "svcproxy.log",
             lambda: proc.poll() is None)
    c.step(f"svcproxy routing the Service range {service_range} (kube-proxy and cluster DNS "
           "emulated)")


def values(c) -> dict:
    """The chart's values for the one-machine cluster: small requests (three hami-control
    pods fit during a rolling update), the node's split count, the simulated node's shim
    folder, kube-scheduler's local image, no /dev/nvidia* device specs (none exist here), the
    dashboard on (reached with `kubectl port-forward`, as the README shows)."""
    small = {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}}
    return {
        "control": {"replicas": 2, "resources": small,
                    "dashboard": {"enabled": True, "port": DASHBOARD_PORT}},
        "kubeScheduler": {"image": scheduler_image(),
                          "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}},
        "devicePlugin": {"deviceSplitCount": c.spec.split, "passDeviceSpecs": False,
                         "shimHostDir": str(c.node.shim_dir), "resources": small},
    }


def helm(c, *args: str, timeout: float = 120) -> str:
    """Runs the real helm against the cluster; its stdout (ClusterError on failure)."""
    home = c.root / "helm"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data"),
           "KUBECONFIG": str(c.kubeconfig)}
    done = subprocess.run([c.bins["helm"], *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
    if done.returncode != 0:
        raise ClusterError(f"helm {' '.join(args[:2])} failed: {done.stderr.strip()[-1500:]}")
    return done.stdout


def install(c) -> None:
    """Labels the node for the DaemonSet, `helm install`s the chart, waits until hami-control
    is Available, hami-node has registered every virtual GPU and the extender is routed."""
    for folder in (c.node.shim_dir, c.node.state_dir):     # the DaemonSet's hostPaths
        folder.mkdir(parents=True, exist_ok=True)
    c.kubectl("label", "node", c.spec.name, f"{NODE_LABEL[0]}={NODE_LABEL[1]}", "--overwrite")
    path = c.root / "values.json"
    path.write_text(json.dumps(values(c), indent=2))
    helm(c, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
         "--values", str(path))
    c.step(f"helm install {RELEASE} charts/hami-py -n {NAMESPACE} (values {path})")
    wait_installed(c)


def wait_installed(c, timeout: float = INSTALL_TIMEOUT_S) -> None:
    """Waits for the Deployment to be Available with every replica updated, the DaemonSet's
    pod to be Ready and kubelet to offer every virtual GPU."""
    from hami_sim.realcluster.node import allocatable
    want = c.spec.split * len(c.spec.gpus)
    wait_for("hami-control's Deployment Available", lambda: rollout_done(c), timeout,
             alive=lambda: no_trouble(c))
    wait_for("hami-node's DaemonSet Ready", lambda: daemonset_ready(c), timeout,
             alive=lambda: no_trouble(c))
    wait_for(f"kubelet offering {want} {C.RESOURCE_GPU}", lambda: allocatable(c) == want, 60)
    wait_for("the extender's Service routed to the leader",
             lambda: bool(ready_endpoints(c, "hami-control-leader")), 60)
    c.node.published(c.gpus()[c.spec.name], record_busy=False)
    c.step(f"hami-control Available ({', '.join(control_pods(c))}); hami-node's DaemonSet "
           f"Ready; kubelet offers {want} x {C.RESOURCE_GPU}")


def no_trouble(c) -> bool:
    """True while no pod of the release is stuck; ClusterError saying why otherwise (a crash
    loop ends the wait at once, with the container's output)."""
    trouble = pod_trouble(c)
    if trouble:
        raise ClusterError(trouble)
    return True


def get_json(c, *args: str) -> dict:
    """`kubectl get ... -o json` in the release's namespace ({} when absent)."""
    out = c.kubectl("get", "-n", NAMESPACE, *args, "-o", "json", check=False)
    try:
        return json.loads(out[:out.rfind("}") + 1]) if "{" in out else {}
    except ValueError:
        return {}


def rollout_done(c, name: str = "hami-control") -> bool:
    """Whether the Deployment is Available with all its replicas updated and no old ones
    left (what `kubectl rollout status` waits for)."""
    d = get_json(c, "deployment", name)
    spec, status = d.get("spec") or {}, d.get("status") or {}
    want = spec.get("replicas", 1)
    available = any(x.get("type") == "Available" and x.get("status") == "True"
                    for x in status.get("conditions") or [])
    return available and status.get("observedGeneration", 0) >= \
        d.get("metadata", {}).get("generation", 1) and \
        status.get("updatedReplicas") == want == status.get("availableReplicas") and \
        status.get("replicas") == want


def daemonset_ready(c) -> bool:
    """Whether hami-node's DaemonSet has its pod Ready on the node."""
    status = get_json(c, "daemonset", "hami-node").get("status") or {}
    return status.get("desiredNumberScheduled", 0) >= 1 and \
        status.get("numberReady") == status.get("desiredNumberScheduled")


def control_pods(c) -> list:
    """The names of hami-control's pods."""
    pods = get_json(c, "pods", "-l", "app.kubernetes.io/name=hami-control").get("items", [])
    return [p["metadata"]["name"] for p in pods]


def ready_endpoints(c, service: str) -> list:
    """The ready endpoint addresses of a Service of the release."""
    slices = get_json(c, "endpointslices", "-l",
                      f"kubernetes.io/service-name={service}").get("items", [])
    return [a for s in slices for e in s.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready") for a in e.get("addresses") or []]


def release_pods(c) -> list:
    """The release's pods as JSON."""
    raw = c.core_v1.list_namespaced_pod(NAMESPACE, _preload_content=False).data
    return json.loads(raw)["items"]


def restarts(c, expected=None) -> list:
    """The release's containers that restarted, with why they last ended (the installed
    mode's answer to 'a component process exited'); expected: (pod, container) -> restarts
    caused on purpose (the soak's kills), not reported unless there were more."""
    expected = expected or {}
    found = []
    for pod in release_pods(c):
        for s in (pod.get("status") or {}).get("containerStatuses") or []:
            if s.get("restartCount", 0) > expected.get((pod["metadata"]["name"], s["name"]), 0):
                last = (s.get("lastState") or {}).get("terminated") or {}
                found.append(f"{pod['metadata']['name']}/{s['name']} restarted "
                             f"{s['restartCount']} time(s), last ended {last.get('reason')} "
                             f"(exit {last.get('exitCode')}) at {last.get('finishedAt')}; "
                             f"its output ended:\n"
                             f"{last_output(c, pod, s['name'], 5, previous=True)}")
    return found


def pod_trouble(c) -> str:
    """Why a pod of the release cannot start, in words, with the end of the container's last
    output ('' while none is stuck)."""
    for pod in get_json(c, "pods").get("items", []):
        status = pod.get("status") or {}
        for s in (status.get("initContainerStatuses") or []) + \
                (status.get("containerStatuses") or []):
            waiting = (s.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK:
                return (f"{pod['metadata']['name']}/{s['name']}: {waiting['reason']}: "
                        f"{waiting.get('message', '')[:800]}; its last output:\n"
                        f"{last_output(c, pod, s['name'])}")
    return ""


STUCK = ("CrashLoopBackOff", "CreateContainerError", "ErrImageNeverPull", "ImagePullBackOff",
         "CreateContainerConfigError", "RunContainerError")


def last_output(c, pod: dict, container: str, lines: int = 15, previous: bool = False) -> str:
    """The end of a container's output (the logs API: the last run, or the one before the
    last restart)."""
    from hami_sim.realcluster.scenario import container_log
    text = container_log(c.core_v1, pod, container, previous)
    return "\n".join(text.splitlines()[-lines:]) if text.strip() else "(none)"
