"""Helpers of the hostile-tenant tests: pods scheduled on a running hami-node, their containers
emulated as real processes in real cgroups laid out as kubelet's cgroupfs driver does (so
hami-node's outside checks map them by host PID), running tenant.c, a small program that
allocates device memory and spins the simulated GPU by whichever route its mode says."""
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from hami_common import constants as C
from hami_sim.container import container_env
from hami_sim.testing import wait_for
from nodehelpers import Scheduler, samples

CGROUP = Path("/sys/fs/cgroup/pids")
TENANT_SOURCE = Path(__file__).with_name("tenant.c")
PERIOD_S = 2.0          # the tests' overCapCheckSeconds: the window of the compute check
CAP_MIB, CORES = 256, 30


def build_tenant(out_dir: Path) -> Path:
    """Compiles tenant.c (libc only)."""
    binary = out_dir / "tenant"
    subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-o", str(binary), str(TENANT_SOURCE),
                    "-ldl"], check=True, capture_output=True, timeout=120)
    return binary


class Tenant:
    """One pod with one container given CAP_MIB and CORES % of GPU 0, and its processes."""

    def __init__(self, hostile, name: str, cap_mib: int = CAP_MIB, cores: int = CORES):
        self.hostile, self.name, self.procs = hostile, name, []
        node, kubelet, sched = hostile.node, hostile.kubelet, hostile.sched
        ctr = Scheduler.container("main", extra_limits={C.RESOURCE_MEM: str(cap_mib)})
        sched.schedule(name, [[(hostile.uuid, cap_mib, cores)]], [ctr])
        [self.alloc] = kubelet.kubelet.wait_allocated("default", name, timeout=20)
        pod = wait_for(lambda: (p := sched.v1.read_namespaced_pod(name, "default"))
                       .status.container_statuses and p, what=f"{name}'s container status")
        cid = pod.status.container_statuses[0].container_id.rpartition("://")[2]
        self.cgroup = CGROUP / "kubepods" / "besteffort" / f"pod{pod.metadata.uid}" / cid
        self.cgroup.mkdir(parents=True, exist_ok=True)
        self.env = container_env(self.alloc, node.env)
        self.shared_file = Path(self.env["CUDA_DEVICE_MEMORY_SHARED_CACHE"])

    def start(self, argv, env=None) -> subprocess.Popen:
        """A process of the container (in its cgroup from before exec), own session."""
        procs = self.cgroup / "cgroup.procs"
        proc = subprocess.Popen(argv, env=env if env is not None else self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True,
                                preexec_fn=lambda: procs.write_text(str(os.getpid())))
        self.procs.append(proc)
        return proc

    def run_tenant(self, mode: str, mib: int, seconds: float, *extra, env=None,
                   prefix=()) -> tuple:
        """Starts tenant.c; (process, its first JSON line)."""
        proc = self.start([*prefix, str(self.hostile.tenant), mode, str(mib), str(seconds),
                           *extra], env)
        return proc, read_json(proc)

    def stop(self) -> None:
        """Kills its processes, removes its cgroup, deletes the pod (kubelet frees its device
        for the next test's pod)."""
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            for stream in (proc.stdout, proc.stderr):
                stream.close()
        for path in (self.cgroup, self.cgroup.parent):
            with contextlib.suppress(OSError):
                path.rmdir()
        self.hostile.sched.delete(self.name)


def read_json(proc: subprocess.Popen) -> dict:
    """The next JSON line a tenant prints (its other lines skipped)."""
    for line in proc.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"the tenant printed nothing (exit {proc.wait()}): "
                         f"{proc.stderr.read()[-2000:]}")


class Hostile:
    """A running hami-node (outside checks every PERIOD_S) and the means to make tenants."""

    def __init__(self, node, kubelet, sched, proc, tenant: Path):
        self.node, self.kubelet, self.sched, self.proc, self.tenant = \
            node, kubelet, sched, proc, tenant
        self.uuid = node.uuids()[0]

    def events(self, pod: str, reason: str) -> list:
        """The pod's Events of one reason."""
        return [e for e in self.sched.v1.list_namespaced_event("default").items
                if e.involved_object.name == pod and e.reason == reason]

    def wait_event(self, pod: str, reason: str, timeout: float) -> tuple:
        """(the first Event, seconds waited for it)."""
        start = time.monotonic()
        events = wait_for(lambda: self.events(pod, reason), timeout=timeout,
                          what=f"a {reason} Event of {pod}")
        return events[0], time.monotonic() - start

    def over(self, metric: str) -> dict:
        """{pod name: value} of one of the outside checks' metrics."""
        return {labels["podname"]: value for labels, value in samples(self.proc.metrics(),
                                                                      metric)}
