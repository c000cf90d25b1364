"""ResourceQuota admission for extended resources, as the real API server does it at pod
creation: for each quota of the pod's namespace with `requests.<extended resource>` keys (the
only form Kubernetes counts extended resources in), the pod's request plus what the namespace's
unfinished pods request must stay within the hard limit, else 403 `exceeded quota`; on success
the quota's status is charged (hard and used of those keys), as the admission plugin does.

A pod's request is Kubernetes': per container `requests` (defaulted to `limits`: extended
resources cannot be overcommitted), the larger of (app containers and sidecars together) and
(each init container on top of the sidecars before it). Only these keys are simulated: no cpu,
memory, object counts or scopes. Without a quota controller, `used` is recomputed from the
pods at each admission, so pods that ended since drop out then.
"""
from __future__ import annotations

from fractions import Fraction

from hami_common.constants import POD_FINISHED_PHASES
from hami_common.quantity import parse_quantity

from .errors import ApiError
from .quantity import canonical

PREFIX = "requests."


def _extended(key: str) -> bool:
    name = key[len(PREFIX):]
    return key.startswith(PREFIX) and "/" in name and not name.startswith("kubernetes.io/")


def _container(ctr: dict, name: str) -> Fraction:
    resources = ctr.get("resources") or {}
    raw = (resources.get("requests") or {}).get(name, (resources.get("limits") or {}).get(name))
    return parse_quantity(raw) if raw is not None else Fraction(0)


def pod_request(pod: dict, name: str) -> Fraction:
    """What Kubernetes' quota charges a pod for resource `name`."""
    spec = pod.get("spec") or {}
    running = peak = Fraction(0)
    for ctr in spec.get("initContainers") or []:
        if ctr.get("restartPolicy") == "Always":
            running += _container(ctr, name)
        else:
            peak = max(peak, running + _container(ctr, name))
    running += sum((_container(c, name) for c in spec.get("containers") or []), Fraction(0))
    return max(peak, running)


def admit_pod(quotas: list, pods: list, pod: dict) -> list:
    """[(quota, status)] to write for a new pod (quota and pod dicts of its namespace); 403
    ApiError naming the first quota it exceeds."""
    charges = []
    for quota in sorted(quotas, key=lambda q: q["metadata"]["name"]):
        hard = {k: v for k, v in ((quota.get("spec") or {}).get("hard") or {}).items()
                if _extended(k)}
        if not hard:
            continue
        used = {k: sum((pod_request(p, k[len(PREFIX):]) for p in pods
                        if (p.get("status") or {}).get("phase") not in POD_FINISHED_PHASES),
                       Fraction(0)) for k in hard}
        asked = {k: pod_request(pod, k[len(PREFIX):]) for k in hard}
        over = [k for k in hard if asked[k] and used[k] + asked[k] > parse_quantity(hard[k])]
        if over:
            name = pod["metadata"].get("name", "")

            def spell(values):
                return ",".join(f"{k}={_spelled(values[k])}" for k in over)
            raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: exceeded quota: '
                           f'{quota["metadata"]["name"]}, requested: {spell(asked)}, used: '
                           f'{spell(used)}, limited: {spell(hard)}')
        charges.append((quota, {"hard": {k: _spelled(v) for k, v in hard.items()},
                                "used": {k: _spelled(used[k] + asked[k]) for k in hard}}))
    return charges


def _spelled(value) -> str:
    if isinstance(value, Fraction):
        value = value.numerator if value.denominator == 1 else float(value)
    return canonical(value)
