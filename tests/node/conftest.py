"""Node-agent tier: hami-node as a real process against the simulated GPU, the API server double
and the kubelet double (helpers: nodehelpers.py)."""
import pytest

from hami_common import constants as C
from hami_sim.testing import *  # noqa: F401,F403

from nodehelpers import SPLIT, simulated_node


@pytest.fixture
def node_cluster(tmp_path):
    """Per test: a simulated node with no hami-node started yet."""
    with simulated_node(tmp_path) as parts:
        yield parts


@pytest.fixture(scope="module")
def shared_node(tmp_path_factory):
    """One running hami-node (with its cluster) shared by a module's tests."""
    with simulated_node(tmp_path_factory.mktemp("shared-node")) as (node, kubelet, sched):
        proc = node.start()
        kubelet.kubelet.wait_registered(C.RESOURCE_GPU, devices=2 * SPLIT, timeout=15)
        yield node, kubelet, sched, proc


@pytest.fixture(scope="module")
def gpu_uuids(shared_node):
    """The shared node's GPU UUIDs."""
    return shared_node[0].uuids()



@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A hami-node whose outside checks run every tenants.PERIOD_S, and tenant.c built; for the
    hostile-tenant tests (helpers: tenants.py). Needs root and the cgroup v1 pids hierarchy to
    place the containers' processes as kubelet does."""
    import os
    from tenants import CGROUP, PERIOD_S, Hostile, build_tenant
    if os.geteuid() != 0 or not CGROUP.is_dir():
        pytest.skip("needs root and the cgroup v1 pids hierarchy to place a process")
    workdir = tmp_path_factory.mktemp("hostile")
    tenant = build_tenant(workdir)
    with simulated_node(workdir) as (node, kubelet, sched):
        proc = node.start("--over-cap-check-seconds", str(PERIOD_S))
        kubelet.kubelet.wait_registered(C.RESOURCE_GPU, devices=2 * SPLIT, timeout=15)
        yield Hostile(node, kubelet, sched, proc, tenant)
