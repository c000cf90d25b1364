"""The soak's pods: the openb trace's mix (GPU count and share per pod, CPU-only pods among
them) on the real cluster's one node, each running a workload that allocates and computes on
its GPUs for a short or a long while and says how it must end."""
from __future__ import annotations

import random
from dataclasses import dataclass

from hami_common import constants as C
from hami_sim.audit.model import ANNO_EXPECT
from hami_sim.realcluster.images import WORKLOAD_IMAGE
from hami_sim.replay.catalog import pods_path
from hami_sim.replay.trace import load_pods

LABEL = "soak.hami.io/run"
MAX_GPUS = 2            # the node has 4 GPUs: the trace's 4- and 8-GPU pods ask for 2
MIN_SHARE = 10          # percent: below it a context alone (300-430 MiB) overflows a T4 slice
HOLD_MIB = 64


@dataclass(frozen=True)
class Shape:
    """How long the soak's workloads run and how many are long (seconds, fraction)."""

    short_s: tuple = (2.0, 6.0)
    long_s: tuple = (20.0, 60.0)
    long_fraction: float = 0.25
    delete_running_fraction: float = 0.3    # of the long pods: deleted while running


@dataclass(frozen=True)
class SoakPod:
    """One pod to create: its manifest, and when (seconds running) the soak deletes it
    while running (0: never, it ends by itself)."""

    name: str
    manifest: dict
    gpu: bool
    delete_after_s: float = 0.0


class Mix:
    """An endless stream of pods drawn from the trace rows in order, seeded."""

    def __init__(self, run_id: str, shape: Shape = Shape(), seed: int = 1,
                 trace: str = "openb", pods: str = "default"):
        self.rows = load_pods(pods_path(trace, pods))
        self.run_id, self.shape = run_id, shape
        self.rand = random.Random(seed)
        self.count = 0

    def next(self) -> SoakPod:
        """The next pod of the mix."""
        row = self.rows[self.count % len(self.rows)]
        self.count += 1
        long = self.rand.random() < self.shape.long_fraction
        low, high = self.shape.long_s if long else self.shape.short_s
        seconds = round(self.rand.uniform(low, high), 1)
        delete_after = 0.0
        if long and self.rand.random() < self.shape.delete_running_fraction:
            delete_after = round(self.rand.uniform(3.0, seconds * 0.7), 1)
        name = f"soak-{self.count:05d}"
        limits = {}
        if row.num_gpu:
            limits[C.RESOURCE_GPU] = str(min(row.num_gpu, MAX_GPUS))
            if row.gpu_milli < 1000:
                share = str(max(MIN_SHARE, row.gpu_milli // 10))
                limits[C.RESOURCE_CORES] = share
                limits[C.RESOURCE_MEM_PERCENTAGE] = share
            command = ["python3", "-m", "hami_sim.demo.workloads", "compute", "--seconds",
                       str(seconds), "--hold-mib", str(HOLD_MIB)]
        else:
            command = ["python3", "-c", f"import time; time.sleep({seconds})"]
        manifest = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {LABEL: self.run_id},
                         "annotations": {ANNO_EXPECT: "Succeeded",
                                         "soak.hami.io/trace-row": row.name}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": WORKLOAD_IMAGE,
                                     "command": command,
                                     "resources": {"limits": limits} if limits else {}}]}}
        return SoakPod(name, manifest, bool(row.num_gpu), delete_after)
