"""Helpers of the real Kubernetes tier: pods of the workload image, waiting on them; commands
run as a user runs them."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from hami_sim.realcluster.images import WORKLOAD_IMAGE

INFO = ["python3", "-m", "hami_sim.demo.workloads", "info"]


def pod(name: str, resources: dict, command=INFO, **meta) -> dict:
    """A one-container pod of the workload image."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": WORKLOAD_IMAGE,
                                     "command": list(command), "resources": resources}]}}


def create(cluster, body: dict, namespace: str = "default") -> dict:
    """Creates a pod; the API server's answer as JSON."""
    resp = cluster.core_v1.create_namespaced_pod(namespace, body, _preload_content=False)
    return json.loads(resp.data)


def get(cluster, name: str, namespace: str = "default") -> dict:
    """The pod as JSON."""
    return json.loads(cluster.core_v1.read_namespaced_pod(name, namespace,
                                                          _preload_content=False).data)


def wait_phase(cluster, name: str, phases=("Succeeded", "Failed"), timeout: float = 90,
               namespace: str = "default") -> dict:
    """Waits until the pod's phase is one of phases; the pod (AssertionError if not)."""
    deadline = time.monotonic() + timeout
    while True:
        current = get(cluster, name, namespace)
        phase = (current.get("status") or {}).get("phase")
        if phase in phases:
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {name} is {phase} after {timeout:.0f} s, not one of "
                                 f"{phases}: {json.dumps(current.get('status'))[:1500]}")
        time.sleep(0.5)


def until(check, timeout: float, what: str, interval: float = 0.5):
    """Polls check() until it returns something truthy (returned); AssertionError naming
    what after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} not within {timeout:.0f} s")


def delete(cluster, *names: str, namespace: str = "default") -> None:
    """Deletes pods at once (no grace), ignoring those already gone."""
    from kubernetes.client.rest import ApiException
    for name in names:
        try:
            cluster.core_v1.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise


# Commands as a user runs them ------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def printed_commands(text: str) -> list:
    """The commands of a hints text: its lines indented by two spaces."""
    return [line.strip() for line in text.splitlines() if line.startswith("  ") and line.strip()]


def run_printed(command: str, env=None, timeout: float = 180, stdin: str = "") -> str:
    """Runs a command as printed (bash, from the checkout's folder); its output, asserting
    that it succeeded."""
    done = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, input=stdin)
    assert done.returncode == 0, f"`{command}` failed ({done.returncode}):\n" \
                                 f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout + done.stderr


class Background:
    """A command that runs until stopped (a foreground `cluster up`, a port-forward, an
    attach), started as printed in its own session; what it printed so far."""

    def __init__(self, command: str, env=None):
        self.command = command
        self.proc = subprocess.Popen(["bash", "-c", command], cwd=REPO, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.lines: list = []
        self.reader = threading.Thread(
            target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")), daemon=True)
        self.reader.start()

    def output(self) -> str:
        """Everything it printed so far."""
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> None:
        """Waits until it printed text (AssertionError with its output if it exits first)."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert self.proc.poll() is None, f"`{self.command}` exited " \
                f"({self.proc.returncode}):\n{self.output()[-3000:]}"
            assert time.monotonic() < deadline, f"`{self.command}` did not print {text!r} " \
                f"in {timeout:.0f} s:\n{self.output()[-3000:]}"
            time.sleep(0.3)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Sends sig to its process group (SIGINT: Ctrl-C in a terminal); its exit code."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.reader.join(timeout=5)


@contextmanager
def running(command: str, ready: str, env=None, timeout: float = 60):
    """A Background command, yielded once it printed ready, stopped at the end."""
    job = Background(command, env)
    try:
        job.wait_for(ready, timeout)
        yield job
    finally:
        job.stop()


def http_get(url: str, timeout: float = 10) -> str:
    """The body of a GET (AssertionError naming the URL when it fails)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.read().decode(errors="replace")
    except OSError as e:
        raise AssertionError(f"GET {url} failed: {e}") from e


def what(command: str) -> str:
    """What a printed kubectl command does: its words after `--kubeconfig FILE` (or `-n NS`),
    without its comment."""
    return command.split("#")[0].split(None, 3)[-1].strip()


def run_all(commands: list, env=None) -> dict:
    """Runs each command as printed, in order (a port-forward until the page it forwards
    answered); what each printed, by what it does."""
    return {what(c): forwarded_page(c, env) if " port-forward " in c else run_printed(c, env)
            for c in commands}


def forwarded_page(command: str, env=None) -> str:
    """Runs a `kubectl port-forward ... PORT` to the dashboard until its page and its
    snapshot answered on 127.0.0.1:PORT; the snapshot."""
    port = re.search(r"port-forward .*\s(\d+)\s*(#.*)?$", command).group(1)
    with running(command, "Forwarding from", env):
        assert "<html" in http_get(f"http://127.0.0.1:{port}/").lower()
        return http_get(f"http://127.0.0.1:{port}/api/snapshot")


def smi_rows(table: str) -> list:
    """The device rows of hami-smi's table: used, limit and SM% of each."""
    rows = []
    for line in table.splitlines():
        f = line.split()
        if len(f) >= 11 and f[1].startswith("GPU-"):
            rows.append({"used": " ".join(f[2:4]), "limit": " ".join(f[4:6]), "sm": f[10]})
    return rows


def check_gpu_pods_seen(said: dict) -> None:
    """What the hints' GPU pods showed: gpumem-oom's output through the logs API (out of
    memory at its 1024 MiB cap), and hami-smi inside the running gpu-hold (its 2048 MiB cap
    and 30 % limit, the 512 MiB it holds)."""
    assert "the container sees 1024 MiB" in said["logs gpumem-oom"]
    assert "CUDA_ERROR_OUT_OF_MEMORY" in said["logs gpumem-oom"]
    smi = said["exec gpu-hold -- hami-smi"]
    (row,) = smi_rows(smi)
    assert (row["limit"], row["sm"]) == ("2.0 GiB", "30"), smi
    assert row["used"].endswith("MiB") and float(row["used"].split()[0]) >= 512, smi
