"""Helpers of the real Kubernetes tier: pods of the workload image, waiting on them."""
from __future__ import annotations

import json
import time

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


def delete(cluster, *names: str, namespace: str = "default") -> None:
    """Deletes pods at once (no grace), ignoring those already gone."""
    from kubernetes.client.rest import ApiException
    for name in names:
        try:
            cluster.core_v1.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise
