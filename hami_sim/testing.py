"""Reusable pytest fixtures for the simulated cluster. In a tier's conftest.py:

    from hami_sim.testing import *  # noqa: F401,F403  (fixtures are picked up by name)

wait_for(predicate, timeout, what) polls until predicate() is truthy.

Fixtures (each cleans up after itself, also when the test fails):
- apiserver: RunningApiServer, in-process, plain HTTP, on a free loopback port
- apiserver_process: RunningApiServer as a real `hami-sim apiserver` process
- kube_api_client: kubernetes.client.ApiClient for `apiserver`
- core_v1: kubernetes.client.CoreV1Api for `apiserver`
- kubeconfig_file: Path of a kubeconfig for `apiserver`
- plugin_dir: a short temporary device plugin directory
- kubelet: RunningKubelet (in-process KubeletDouble as .kubelet) for node "node-1" in plugin_dir
- kubectl_binary: path of a kubectl: $HAMI_KUBECTL, else the project's own build
  (`bash tools/k8s/build.sh kubectl`, which prints the binary's path last); never skipped
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from .launch import (RunningApiServer, RunningKubelet, short_tempdir, start_apiserver,
                     start_kubelet)

__all__ = ["pod_manifest", "wait_for", "apiserver", "apiserver_process", "kube_api_client",
           "core_v1", "kubeconfig_file", "plugin_dir", "kubelet", "kubectl_binary",
           "start_apiserver", "start_kubelet", "RunningApiServer", "RunningKubelet"]


def pod_manifest(name: str, containers=None, namespace=None, **meta) -> dict:
    """A minimal valid pod manifest (one busybox container unless containers are given)."""
    metadata = {"name": name, **meta}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": containers or [{"name": "main", "image": "busybox:1.36"}]}}


def wait_for(predicate, timeout: float = 5.0, what: str = "condition",
             interval: float = 0.02):
    """Polls until predicate() is truthy and returns its value; AssertionError naming `what`
    after timeout seconds (predicate is asked once more at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def apiserver(tmp_path) -> RunningApiServer:
    """An in-process API server double (HTTP on 127.0.0.1, a free port)."""
    running = start_apiserver(workdir=tmp_path / "apiserver", bookmark_interval=0.5)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def apiserver_process(tmp_path) -> RunningApiServer:
    """The API server double as a real `hami-sim apiserver` process."""
    running = start_apiserver(process=True, workdir=tmp_path / "apiserver-proc")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def kube_api_client(apiserver):
    """A kubernetes.client.ApiClient configured for `apiserver`."""
    client = apiserver.api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def core_v1(kube_api_client):
    """kubernetes.client.CoreV1Api for `apiserver`."""
    from kubernetes import client
    return client.CoreV1Api(kube_api_client)


@pytest.fixture
def kubeconfig_file(apiserver):
    """Path of a kubeconfig pointing at `apiserver`."""
    return apiserver.kubeconfig


@pytest.fixture
def plugin_dir():
    """A device plugin directory with a short path (Unix socket length limit)."""
    path = short_tempdir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(apiserver, plugin_dir, tmp_path) -> RunningKubelet:
    """An in-process kubelet double for node `node-1`, syncing every 0.1 s."""
    running = start_kubelet("node-1", plugin_dir, apiserver, record_dir=tmp_path / "records",
                            sync_interval=0.1, retry_base=0.2, retry_max=2.0,
                            log=lambda msg: None)
    try:
        yield running
    finally:
        running.stop()


REPO_ROOT = Path(__file__).resolve().parents[1]
KUBECTL_BUILD = Path("tools") / "k8s" / "build.sh"


@pytest.fixture(scope="session")
def kubectl_binary() -> str:
    """kubectl as the project installs it: $HAMI_KUBECTL when set, else the path that
    `bash tools/k8s/build.sh kubectl` prints last (it builds kubectl once, then finds it in
    its cache). A missing script or a failed build fails the test: kubectl is the project's
    to install, not the machine's."""
    if chosen := os.environ.get("HAMI_KUBECTL"):
        if not os.access(chosen, os.X_OK):
            pytest.fail(f"HAMI_KUBECTL={chosen} is not an executable file")
        return chosen
    if not (REPO_ROOT / KUBECTL_BUILD).is_file():
        pytest.fail(f"{KUBECTL_BUILD} is missing: it builds kubectl for these tests "
                    "(or set HAMI_KUBECTL to a kubectl binary)")
    done = subprocess.run(["bash", str(KUBECTL_BUILD), "kubectl"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=3600)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines or not os.access(lines[-1], os.X_OK):
        pytest.fail(f"bash {KUBECTL_BUILD} kubectl failed (exit {done.returncode}); its "
                    f"output ends:\n{(done.stdout + done.stderr)[-2000:]}")
    return lines[-1]
