"""Browser tier: the dashboard in headless Chromium (Debian's chromium + chromium-driver,
installed by tools/browser/install.sh from `make test`), against a running `hami-sim cluster
up` and against a synthetic openb-size view served by the real dashboard code."""
from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2ehelpers import Command, workdir_of  # noqa: E402

from browserhelpers import Browser  # noqa: E402

@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the tier."""
    with Browser.start() as b:
        yield b


@dataclass
class RunningCluster:
    """A `hami-sim cluster up` process, its API and its dashboard."""

    up: Command
    workdir: Path
    v1: object
    url: str


@pytest.fixture(scope="module")
def cluster():
    """`hami-sim cluster up` with its dashboard; killed after the module (its pods keep the
    CPUs busy: nothing of it may outlive the module)."""
    from kubernetes import client
    from hami_sim.kubeconfig import api_client_from_kubeconfig
    with tempfile.TemporaryDirectory(prefix="hami-dash-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        up = Command("cluster", "up", "--kubeconfig-out", str(kubeconfig))
        try:
            up.wait_for("Ctrl-C stops everything", 90)
            url = up.wait_for("Dashboard (read-only): ", 5).split(": ", 1)[1].strip()
            workdir = Path(workdir_of(up.wait_for("(kubeconfig ", 1)))
            api = api_client_from_kubeconfig(kubeconfig)
            try:
                yield RunningCluster(up, workdir, client.CoreV1Api(api), url)
            finally:
                api.close()
        finally:
            up.kill()
