"""What the real API server does with GPU pods our webhook sees, and that our webhook's
answer is consistent with it: a pod giving nvidia.com/gpumem without nvidia.com/gpu is
completed (count added, requests defaulted from limits after the patch) and runs; a pod giving
extended resources as requests without limits is refused with 422 by the real validation."""
from __future__ import annotations

import json

import pytest
from kubernetes.client.rest import ApiException

from k8shelpers import create, delete, pod, wait_phase

pytestmark = pytest.mark.timeout(3600)


def test_gpumem_without_gpu_count_gets_one_gpu_and_runs(real_cluster):
    created = create(real_cluster, pod("gpumem-only", {"limits": {"nvidia.com/gpumem": "1024"}}))
    try:
        resources = created["spec"]["containers"][0]["resources"]
        assert created["spec"]["schedulerName"] == "hami-scheduler"
        assert resources["limits"]["nvidia.com/gpu"] == "1"
        # The real API server defaults requests from limits again after the webhook's patch.
        assert resources["requests"] == resources["limits"]
        done = wait_phase(real_cluster, "gpumem-only")
        assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"])[:1500]
    finally:
        delete(real_cluster, "gpumem-only")


def refused(cluster, name: str, resources: dict) -> str:
    """Creates a pod the API server must refuse with 422; its message."""
    with pytest.raises(ApiException) as exc:
        create(cluster, pod(name, resources))
        delete(cluster, name)
    assert exc.value.status == 422, exc.value.body
    return json.loads(exc.value.body)["message"]


def test_extended_requests_without_equal_limits_are_refused_with_422(real_cluster):
    """Our webhook leaves these pods alone (it adds no limits the user did not give), and the
    real validation refuses them before they exist; the API server double says the same
    (tests/cluster/test_apiserver_objects.py)."""
    assert refused(real_cluster, "requests-only", {"requests": {
        "nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}}) == (
        'Pod "requests-only" is invalid: spec.containers[0].resources.limits: Required value: '
        'Limit must be set for non overcommitable resources')
    assert refused(real_cluster, "requests-differ", {
        "requests": {"nvidia.com/gpumem": "512"},
        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}}).endswith(
        'spec.containers[0].resources.requests: Invalid value: "512": must '
        'be equal to nvidia.com/gpumem limit of 1024')
