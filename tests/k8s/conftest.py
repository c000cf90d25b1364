"""Real Kubernetes tier: hami-py in a real one-machine cluster (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler with deploy/'s configuration, containerd + runc +
kubelet), hami-control and hami-node with deploy/'s RBAC, over simulated GPUs.

One cluster for the whole session. `make test` builds the components first (the first time
about 25 minutes on two cores, then cached under ~/.cache/hami-py/k8s); run directly, the
fixture builds them. Needs root (kubelet, containerd), as our machines and CI run.
"""
from __future__ import annotations

import io
import os

import pytest

from hami_sim.demo.report import Reporter
from hami_sim.realcluster.cluster import RealCluster

# Starting the cluster (and, on a fresh machine run without make, building it) happens in the
# first test's setup; later tests are quick.
START_TIMEOUT_S = 3600
# Modules with a cluster of their own run first: the machine holds one real cluster at a time
# (its lock), and the session's cluster, once started, is held until the session ends.
OWN_CLUSTER_MODULES = ("test_cluster_up_real.py", "test_helm_install_real.py", "test_dra_real.py",
                       "test_soak_real.py")


def pytest_collection_modifyitems(session, config, items):
    """Moves the tests of OWN_CLUSTER_MODULES to the front (their order kept)."""
    items.sort(key=lambda item: item.path.name not in OWN_CLUSTER_MODULES)


class StepLog(io.StringIO):
    """What the cluster reported while starting (shown when a test fails)."""


def started_cluster(**options):
    """A RealCluster(**options) started, yielded, and stopped (a fixture's body)."""
    if os.geteuid() != 0:
        pytest.fail("tests/k8s runs kubelet and containerd, which need root (our machines and "
                    "CI run as root); run `sudo make test`")
    out = StepLog()
    reporter = Reporter(out, tty=False)
    cluster = RealCluster(step=reporter.step, **options)
    cluster.reporter = reporter
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def real_cluster():
    """The real cluster, started once for the session and stopped at its end."""
    yield from started_cluster()


@pytest.fixture(scope="module")
def installed():
    """A real cluster of its own with hami-py installed by `helm install`
    (test_helm_install_real.py; stopped at the module's end)."""
    yield from started_cluster(install="helm")


@pytest.fixture(scope="module")
def dra_cluster():
    """A real cluster of its own in DRA mode (test_dra_real.py; stopped at the module's end)."""
    yield from started_cluster(dra=True)


@pytest.fixture(scope="module")
def soak_cluster():
    """A real cluster of its own for the soak (test_soak_real.py), whose faults restart its
    components (stopped at the module's end)."""
    yield from started_cluster()
