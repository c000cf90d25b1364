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


def test_requests_without_limits_are_refused_with_422(real_cluster):
    body = pod("requests-only", {"requests": {"nvidia.com/gpu": "1",
                                              "nvidia.com/gpumem": "1024"}})
    with pytest.raises(ApiException) as refused:
        create(real_cluster, body)
        delete(real_cluster, "requests-only")
    assert refused.value.status == 422, refused.value.body
    message = json.loads(refused.value.body)["message"]
    assert "Limit must be set" in message and "nvidia.com/gpumem" in message, message
