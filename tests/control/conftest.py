"""Fixtures of the control-plane tier: the API server double, GPU nodes published the way the
node agent publishes them, and hami-control (in-process or as a process) over real HTTP."""
from __future__ import annotations

import pytest

from hami_sim.testing import *  # noqa: F401,F403
from ctlhelpers import start_plane


@pytest.fixture
def control(apiserver):
    """A single hami-control (no leader election) against `apiserver`, in-process."""
    running = start_plane(apiserver)
    try:
        yield running
    finally:
        running.stop()
