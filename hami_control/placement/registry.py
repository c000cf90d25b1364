"""Policies by name. The server exposes binpack, spread and fragaware; the trace replay may also
ask for the paper's baselines random, bestfit and fgd (fgd needs its typical workload)."""
import random
from typing import Optional

from hami_control.placement.baselines import FGD, BestFit, KubeDra, Random
from hami_control.placement.fragaware import FragAware
from hami_control.placement.learn import OnlineWorkload
from hami_control.placement.model import PlacementError
from hami_control.placement.policy import Binpack, Spread
from hami_control.placement.workload import Workload

SERVER_POLICIES = ("binpack", "spread", "fragaware")
BASELINE_POLICIES = ("random", "bestfit", "fgd", "kubedra")


class PolicyRegistry:
    """Creates each policy once, with the shared learned workload and random source."""

    def __init__(self, rng: Optional[random.Random] = None,
                 fgd_workload: Optional[Workload] = None, allow_baselines: bool = False,
                 learner: Optional[OnlineWorkload] = None):
        self.rng = rng or random.Random(0)
        self.learner = learner or OnlineWorkload()
        self.fgd_workload = fgd_workload
        self.allowed = SERVER_POLICIES + (BASELINE_POLICIES if allow_baselines else ())
        self._policies = {}

    def _make(self, name: str):
        if name == "binpack":
            return Binpack()
        if name == "spread":
            return Spread()
        if name == "fragaware":
            return FragAware(self.learner)
        if name == "random":
            return Random(self.rng)
        if name == "bestfit":
            return BestFit()
        if name == "kubedra":
            return KubeDra()
        if self.fgd_workload is None:
            raise PlacementError("policy fgd needs the typical workload of the whole trace; it "
                                 "is a replay baseline, not available in the server")
        return FGD(self.fgd_workload)

    def get(self, name: str):
        """The policy object of that name; PlacementError names the known ones."""
        if name not in self.allowed:
            raise PlacementError(f"unknown scheduling policy {name!r}; use one of "
                                 f"{', '.join(self.allowed)}")
        policy = self._policies.get(name)
        if policy is None:
            policy = self._policies[name] = self._make(name)
        return policy

    def resolve(self, node_name: str, gpu_name: str) -> tuple:
        """(node policy, GPU policy)."""
        return self.get(node_name), self.get(gpu_name)

    def observe(self, request) -> None:
        """Feed a request to the learned workload model."""
        self.learner.observe(request)
