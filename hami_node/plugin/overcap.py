"""Catch what slips past the shim: containers whose driver-counted GPU memory exceeds their cap.

The shim binds cooperative processes only: one that reaches the driver without it (linked
statically against the device nodes, /etc/ld.so.preload removed by root in the container, a
rewritten shared accounting file) can exceed its caps; so can one that keeps device memory a
neighbour shared with it (a VMM file descriptor, a legacy IPC handle) after the neighbour
exits, as the driver then charges the process keeping it. This check does not trust the
container: it takes the driver's own per-process figures (NVML's running processes, keyed by
host PID), maps each process to its pod and container by the cgroup the kernel put it in, sums
per container and GPU, and compares with what Allocate handed out (the pod's
`hami.io/vgpu-devices-allocated`). An offender is named in the log, gets a Warning Event and a
metric, and, where the operator asked for it (`evictOverCap`), is evicted.
"""
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from hami_common import constants as C
from hami_common import pod_devices
from hami_common.errors import HamiFormatError
from hami_node.plugin.allocate import pod_containers
from hami_node.plugin.errors import BackendError, ClusterError
from hami_node.plugin.worker import Worker

log = logging.getLogger(__name__)
MIB = 1 << 20
EVENT_REASON = "GPUMemoryOverCap"
# why a container can be over what the shim holds it to (both outside checks say it)
BYPASS = ("a process reaches the driver without the shim (static linking, ld.so.preload "
          "removed, or its accounting file rewritten)")
# a way past the memory cap only: the driver charges memory shared with a process (a VMM file
# descriptor, a legacy IPC handle) to it once its maker has exited, and no shim counted it
KEPT = "or it keeps memory another process made and shared with it after that one exited"
# kubelet's pod cgroup: ".../pod<uid>/<container id>" (cgroupfs) or
# ".../kubepods-<qos>-pod<uid with _>.slice/<runtime>-<container id>.scope" (systemd).
_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_CONTAINER = re.compile(r"(?:^|[-/])([0-9a-f]{64})(?:\.scope)?$")


def cgroup_owner(text: str) -> Optional[tuple]:
    """(pod UID, container ID) from the text of /proc/<pid>/cgroup; None outside a pod."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        pod = _POD.search(path)
        if pod:
            container = _CONTAINER.search(path)
            return pod.group(1).replace("_", "-"), container.group(1) if container else ""
    return None


def read_cgroup_owner(pid: int, proc: Path = Path("/proc")) -> Optional[tuple]:
    """cgroup_owner of a live process; None when it is gone or unreadable."""
    try:
        return cgroup_owner((proc / str(pid) / "cgroup").read_text())
    except OSError:
        return None


@dataclass(frozen=True)
class OverCap:
    """One container over its cap on one GPU."""

    namespace: str
    pod: str
    uid: str
    container: str
    gpu: str
    used: int          # bytes, the driver's count over the container's processes
    cap: int           # bytes, from the pod's allocation
    pids: tuple


def allocated_devices(pod: dict) -> list:
    """[(container name, ContainerDevice)] of what the scheduler decided (its annotation);
    none when the annotation is missing or unreadable."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        C.ANNO_DEVICES_ALLOCATED, "")
    try:
        entries = pod_devices.decode(value)
    except HamiFormatError:
        return []
    return [(spec.get("name", ""), device)
            for spec, devices in zip(pod_containers(pod), entries) for device in devices]


def _caps(pod: dict) -> dict:
    """{(container name, GPU UUID): cap bytes} from what the scheduler decided."""
    return {(name, device.uuid): device.usedmem * MIB
            for name, device in allocated_devices(pod) if device.usedmem}


def container_names(pod: dict) -> dict:
    """{container ID: name} from the pod's status (IDs as `<runtime>://<id>`)."""
    status = pod.get("status") or {}
    return {str(s.get("containerID", "")).rpartition("://")[2]: s.get("name", "")
            for s in (status.get("containerStatuses") or []) +
            (status.get("initContainerStatuses") or []) if s.get("containerID")}


def add_by_container(per_gpu: dict, owner: Callable[[int], Optional[tuple]], by_uid: dict,
                     totals: dict) -> None:
    """Adds {GPU UUID: {host pid: amount}} into totals {(pod UID, container name, GPU UUID):
    (sum, pids)}, each process counted to the container its cgroup names (`owner`); processes
    of no pod in by_uid ({pod UID: pod}) are left out."""
    for gpu, per_pid in per_gpu.items():
        for pid, amount in per_pid.items():
            found = owner(pid)
            if not found or found[0] not in by_uid:
                continue
            key = (found[0], container_names(by_uid[found[0]]).get(found[1], ""), gpu)
            total, pids = totals.get(key, (0, ()))
            totals[key] = (total + amount, pids if pid in pids else pids + (pid,))


def find_over_cap(processes: dict, owner: Callable[[int], Optional[tuple]],
                  pods: Iterable[dict]) -> list:
    """processes: {GPU UUID: {host pid: bytes}}; owner: pid -> (pod UID, container ID)."""
    by_uid = {(p.get("metadata") or {}).get("uid"): p for p in pods}
    used: dict = {}
    add_by_container(processes, owner, by_uid, used)
    out = []
    for (uid, name, gpu), (amount, pids) in sorted(used.items()):
        pod = by_uid[uid]
        cap = _caps(pod).get((name, gpu))
        if cap is not None and amount > cap:
            meta = pod.get("metadata") or {}
            out.append(OverCap(meta.get("namespace", ""), meta.get("name", ""), uid, name, gpu,
                               amount, cap, pids))
    return out


class OverCapWatch(Worker):
    """Checks every `interval_s` seconds; reports each offender once while it stays over."""

    join_s = 0.5    # read-only work: a check in flight is not worth delaying shutdown for

    def __init__(self, backend, cluster, node: str, interval_s: float, *,
                 evict: bool = False, owner: Callable[[int], Optional[tuple]] = read_cgroup_owner,
                 on_round: Callable[[list], None] = lambda offenders: None,
                 log: Callable[[str], None] = print):
        self.backend, self.cluster, self.node = backend, cluster, node
        self.interval_s, self.evict, self.owner = interval_s, evict, owner
        self.on_round, self.log = on_round, log
        self.reports = OffenderReports(cluster, EVENT_REASON, evict, log)
        super().__init__("over-cap")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except (BackendError, ClusterError) as e:
                self.log(f"over-cap check skipped: {e}")

    def check(self) -> list:
        """One round: the offenders found (each reported once while it stays over)."""
        processes = {gpu.uuid: self.backend.process_memory(gpu.uuid)
                     for gpu in self.backend.discover()}
        offenders = find_over_cap(processes, self.owner, self.cluster.list_node_pods(self.node))
        self.on_round(offenders)
        self.reports.round(offenders, self._message)
        return offenders

    @staticmethod
    def _message(o: OverCap) -> str:
        return (f"container {o.container!r} uses {o.used // MIB} MiB of GPU {o.gpu} by the "
                f"driver's count (processes {', '.join(map(str, o.pids))}), over its cap of "
                f"{o.cap // MIB} MiB: {BYPASS}, {KEPT}")


class OffenderReports:
    """What both outside checks (this one and overshare.py) do with their offenders: each
    (pod UID, container, GPU) reported once while it stays over, by a log line naming the pod,
    a Warning Event with `reason` and, where the operator asked, an eviction."""

    def __init__(self, cluster, reason: str, evict: bool, log: Callable[[str], None]):
        self.cluster, self.reason, self.evict, self.log = cluster, reason, evict, log
        self._reported: set = set()

    def round(self, offenders: list, message: Callable[[object], str]) -> None:
        self._reported &= {(o.uid, o.container, o.gpu) for o in offenders}
        for o in offenders:
            if (o.uid, o.container, o.gpu) not in self._reported:
                self._reported.add((o.uid, o.container, o.gpu))
                self._act(o, message(o))

    def _act(self, o, message: str) -> None:
        self.log(f"pod {o.namespace}/{o.pod}: {message}"
                 + ("; evicting it" if self.evict else ""))
        pod = {"kind": "Pod", "metadata": {"namespace": o.namespace, "name": o.pod,
                                           "uid": o.uid}}
        try:
            self.cluster.create_event(pod, self.reason, message)
            if self.evict:
                self.cluster.evict_pod(o.namespace, o.pod)
        except ClusterError as e:
            self.log(f"pod {o.namespace}/{o.pod}: could not record or evict: {e}")
