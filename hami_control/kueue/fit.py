"""Does a Kueue Workload fit on the GPUs now? The pure part of hami-control's admission check.

Kueue admits a Workload on its ClusterQueue's quota, summed over pods: `nvidia.com/gpumem`
counts each container's per-GPU figure once, whatever its GPU count, and 20 GiB free spread
over two GPUs counts as much as 20 GiB on one. So an admitted job can sit Pending on a
fragmented cluster. The check places every pod of every pod set (count times) on the view as
the filter would (each one's GPUs taken before the next is tried, the namespace's GPU quota
included) and says where the first pod that does not fit failed.
"""
from dataclasses import dataclass
from typing import Mapping

from hami_common.errors import RequestError
from hami_common.request import RequestDefaults, parse_pod


@dataclass(frozen=True)
class WorkloadPods:
    """A Workload's pods as placement requests: [(pod set name, request), ...]."""

    key: str                # namespace/name of the Workload
    pods: tuple
    problem: str = ""       # a pod template that cannot be read (then `pods` is empty)


def workload_pods(workload: Mapping, defaults: RequestDefaults = RequestDefaults()) \
        -> WorkloadPods:
    """The pods a kueue.x-k8s.io Workload stands for, from its pod sets' templates."""
    meta = workload.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", meta.get("name") or ""
    pods = []
    for podset in (workload.get("spec") or {}).get("podSets") or []:
        template = podset.get("template") or {}
        tmeta = template.get("metadata") or {}
        try:
            count = int(podset.get("count") or 1)
        except (TypeError, ValueError):
            count = 1
        for i in range(count):
            pod = {"metadata": {"name": f"{name}-{podset.get('name', 'main')}-{i}",
                                "namespace": namespace,
                                "annotations": dict(tmeta.get("annotations") or {}),
                                "labels": dict(tmeta.get("labels") or {})},
                   "spec": template.get("spec") or {}}
            try:
                pods.append((str(podset.get("name") or "main"), parse_pod(pod, defaults)))
            except RequestError as e:
                return WorkloadPods(f"{namespace}/{name}", (), f"pod set "
                                    f"{podset.get('name')}: {e}")
    return WorkloadPods(f"{namespace}/{name}", tuple(pods))


def check_message(pods: WorkloadPods, failed_at: int, why: str) -> str:
    """The admission check's message for a workload that does not fit (or did)."""
    if pods.problem:
        return f"hami-control cannot read the pods: {pods.problem}"
    if failed_at < 0:
        gpu_pods = sum(1 for _, r in pods.pods if r.wants_gpu)
        return f"a GPU fits each of the {gpu_pods} GPU pod(s) now"
    podset, _ = pods.pods[failed_at]
    return (f"no GPU can hold pod {failed_at + 1} of {len(pods.pods)} (pod set {podset}) now: "
            f"{why}; admission waits until one can")
