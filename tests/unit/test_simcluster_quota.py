"""The API server double's ResourceQuota admission of extended resources (requests.<name>)."""
import pytest

from hami_sim.apiserver.errors import ApiError
from hami_sim.apiserver.quota import admit_pod, pod_request

GPU = "nvidia.com/gpu"


def _ctr(value, restart=None, section="limits"):
    ctr = {"name": "c", "resources": {section: {GPU: value}}}
    if restart:
        ctr["restartPolicy"] = restart
    return ctr


def _pod(name="p", containers=(), init=(), phase=None):
    pod = {"metadata": {"name": name}, "spec": {"containers": list(containers),
                                                "initContainers": list(init)}}
    if phase:
        pod["status"] = {"phase": phase}
    return pod


@pytest.mark.parametrize("pod, want", [
    (_pod(containers=[_ctr("2"), _ctr("1", section="requests")]), 3),
    (_pod(containers=[_ctr("1")], init=[_ctr("4")]), 4),
    (_pod(containers=[_ctr("1")], init=[_ctr("1", restart="Always"), _ctr("2")]), 3),
    (_pod(containers=[{"name": "c"}]), 0),
], ids=["sum", "init-larger", "sidecar-under-init", "none"])
def test_pod_request_is_kubernetes_effective_request(pod, want):
    assert pod_request(pod, GPU) == want


def test_admission_refuses_over_a_requests_key_and_charges_otherwise():
    quota = {"metadata": {"name": "q"}, "spec": {"hard": {
        f"requests.{GPU}": "3", "limits.nvidia.com/gpumem": "1", "requests.cpu": "1"}}}
    running = [_pod("a", [_ctr("2")]), _pod("done", [_ctr("5")], phase="Succeeded")]
    [(_, status)] = admit_pod([quota], running, _pod("b", [_ctr("1")]))
    assert status == {"hard": {f"requests.{GPU}": "3"}, "used": {f"requests.{GPU}": "3"}}
    with pytest.raises(ApiError) as refused:
        admit_pod([quota], running + [_pod("b", [_ctr("1")])], _pod("c", [_ctr("1")]))
    assert refused.value.code == 403 and refused.value.message == (
        f'pods "c" is forbidden: exceeded quota: q, requested: requests.{GPU}=1, used: '
        f'requests.{GPU}=3, limited: requests.{GPU}=3')
    assert admit_pod([quota], running, _pod("d", [{"name": "c"}]))   # asks nothing: admitted
