"""The openb trace files: nodes and pods as CSV rows, turned into what the cluster speaks
(node register annotations, v1.Pod objects)."""
import csv
from dataclasses import dataclass
from pathlib import Path

from hami_common import constants as C
from hami_common.node_register import DeviceInfo

# MiB of one GPU per model (NVML totals); models the trace anonymises get 16 GiB.
MODEL_MEMORY_MIB = {"T4": 15109, "V100M16": 16160, "P100": 16280, "A10": 22731,
                    "V100M32": 32510}
DEFAULT_MEMORY_MIB = 16384


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file, row and column."""


@dataclass(frozen=True)
class TraceNode:
    """One row of the node list."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str

    def devices(self, split_count: int = 10) -> list:
        """The GPUs as the node agent would register them."""
        mem = MODEL_MEMORY_MIB.get(self.model, DEFAULT_MEMORY_MIB)
        return [DeviceInfo(id=f"GPU-{self.name}-{i}", index=i, count=split_count, devmem=mem,
                           devcore=100, type=f"NVIDIA-{self.model}",
                           numa=0 if i < max(1, self.gpus // 2) else 1)
                for i in range(self.gpus)]


@dataclass(frozen=True)
class TracePod:
    """One row of a pod list: CPU, memory, GPUs and the share of each, allowed models."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple = ()

    @property
    def demand_milli(self) -> int:
        """GPU share asked, thousandths of a GPU."""
        return self.num_gpu * self.gpu_milli

    def pod_object(self, name: str = "", namespace: str = "trace") -> dict:
        """The v1.Pod a user would submit for this row: sharing pods ask for gpucores and
        gpumem-percentage of one GPU, whole-GPU pods for bare nvidia.com/gpu (exclusive cards),
        model constraints become nvidia.com/use-gputype."""
        limits = {}
        if self.num_gpu:
            limits[C.RESOURCE_GPU] = str(self.num_gpu)
            if self.gpu_milli < 1000:
                limits[C.RESOURCE_CORES] = str(self.gpu_milli // 10)
                limits[C.RESOURCE_MEM_PERCENTAGE] = str(self.gpu_milli // 10)
        annotations = {C.ANNO_USE_GPUTYPE: ",".join(self.gpu_spec)} if self.gpu_spec else {}
        resources = {"requests": {"cpu": f"{self.cpu_milli}m", "memory": f"{self.memory_mib}Mi"}}
        if limits:
            resources["limits"] = limits
        return {"metadata": {"name": name or self.name, "namespace": namespace,
                             "annotations": annotations},
                "spec": {"containers": [{"name": "main", "resources": resources}]}}


def _int(row: dict, key: str, where: str) -> int:
    try:
        return int(row[key])
    except (KeyError, TypeError, ValueError) as e:
        raise TraceError(f"{where}: column {key!r} must be an integer, got {row.get(key)!r}") \
            from e


def _rows(path) -> list:
    try:
        with open(Path(path), newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        raise TraceError(f"cannot read trace file {path}: {e.strerror}") from e


def load_nodes(path) -> list:
    """The node list (`sn,cpu_milli,memory_mib,gpu,model`)."""
    nodes = []
    for i, row in enumerate(_rows(path), start=2):
        where = f"{path}:{i}"
        nodes.append(TraceNode(row.get("sn") or f"node-{i}", _int(row, "cpu_milli", where),
                               _int(row, "memory_mib", where), _int(row, "gpu", where),
                               (row.get("model") or "").strip()))
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def load_pods(path) -> list:
    """A pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`)."""
    pods = []
    for i, row in enumerate(_rows(path), start=2):
        where = f"{path}:{i}"
        num, milli = _int(row, "num_gpu", where), _int(row, "gpu_milli", where)
        if num < 0 or not 0 <= milli <= 1000 or (num and milli % 10):
            raise TraceError(f"{where}: num_gpu must be >= 0 and gpu_milli a multiple of 10 "
                             f"in 0..1000, got {num} x {milli}")
        spec = tuple(sorted({m.strip() for m in (row.get("gpu_spec") or "").split("|")
                             if m.strip()}))
        pods.append(TracePod(row.get("name") or f"pod-{i}", _int(row, "cpu_milli", where),
                             _int(row, "memory_mib", where), num, milli if num else 0, spec))
    if not pods:
        raise TraceError(f"{path}: no pods")
    return pods
