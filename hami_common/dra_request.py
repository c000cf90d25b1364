"""A container's HAMi GPU ask (nvidia.com/gpu, gpumem, gpumem-percentage, gpucores and the
type/UUID annotations) as the devices of a ResourceClaim for hami-py's DRA driver: pure.

- `gpu: N` -> `count: N`, each on a different GPU (a `distinctAttribute` constraint on the
  GPU's UUID: with shareable GPUs, `count: 2` could otherwise take two shares of one GPU).
- `gpumem: M` -> `capacity.requests.memory: <M>Mi` per GPU; `gpucores: C` -> `cores: C`.
- `gpumem-percentage: P` -> P % of the memory of the GPUs the pod may use (capacity is
  absolute): one plain request when they all have one size, else one `firstAvailable`
  subrequest per size, each asking P % of that size from GPUs of that size (kube-scheduler's
  allocator tries each: three times its CPU per pod with five sizes, bench/k8s_throughput.py).
- the type and UUID annotations -> a CEL selector on the published attributes.
"""
from typing import Optional, Sequence

from hami_common.constants import DRA_CORES, DRA_DEVICE_CLASS, DRA_DRIVER, DRA_MEMORY
from hami_common.errors import RequestError
from hami_common.request import ContainerRequest, DeviceFilters

MAX_SUBREQUESTS = 8      # the API's limit on firstAvailable
REQUEST = "gpu"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def selector_expression(filters: DeviceFilters) -> Optional[str]:
    """The CEL selector for the pod's GPU type and UUID annotations (None: any GPU). Types
    match as HAMi matches them: a case-insensitive substring of the registered type."""
    attr = f'device.attributes["{DRA_DRIVER}"]'
    terms = []
    if filters.use_types:
        terms.append("(" + " || ".join(f"{attr}.type.lowerAscii().contains({_quote(t)})"
                                       for t in filters.use_types) + ")")
    terms += [f"!{attr}.type.lowerAscii().contains({_quote(t)})" for t in filters.nouse_types]
    if filters.use_uuids:
        terms.append(f"{attr}.uuid in [{', '.join(_quote(u) for u in sorted(filters.use_uuids))}]")
    if filters.nouse_uuids:
        listed = ", ".join(_quote(u) for u in sorted(filters.nouse_uuids))
        terms.append(f"!({attr}.uuid in [{listed}])")
    return " && ".join(terms) or None


def _exact(count: int, selectors: list, capacity: dict) -> dict:
    out = {"deviceClassName": DRA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": count}
    if selectors:
        out["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if capacity:
        out["capacity"] = {"requests": capacity}
    return out


def claim_devices(ask: ContainerRequest, filters: DeviceFilters,
                  memory_sizes_mib: Sequence[int] = ()) -> dict:
    """The `spec.devices` of the container's claim; RequestError when it cannot be written
    (a percentage with no GPU published, more sizes than the API allows).
    `memory_sizes_mib`: the memory sizes of the published GPUs the pod's filters allow
    (`published_sizes`)."""
    if ask.nums < 1:
        raise RequestError(f"container {ask.name!r} asks for no GPU")
    base = [s for s in [selector_expression(filters)] if s]
    cores = {DRA_CORES: str(ask.cores)} if ask.cores else {}
    if ask.mem_mib or not ask.mem_percent or ask.mem_percent >= 100:
        memory = {DRA_MEMORY: f"{ask.mem_mib}Mi"} if ask.mem_mib else {}
        request = {"name": REQUEST, "exactly": _exact(ask.nums, base, {**memory, **cores})}
    else:
        sizes = sorted(set(memory_sizes_mib), reverse=True)
        if not sizes:
            raise RequestError(f"container {ask.name!r} asks for {ask.mem_percent} % of a GPU's "
                               f"memory, but no GPU of {DRA_DRIVER} is published yet to take "
                               "it from; give nvidia.com/gpumem in MiB instead")
        if len(sizes) > MAX_SUBREQUESTS:
            raise RequestError(f"container {ask.name!r}: gpumem-percentage over {len(sizes)} GPU "
                               f"memory sizes exceeds the {MAX_SUBREQUESTS} alternatives a claim "
                               "may list; give nvidia.com/gpumem in MiB instead")
        attr = f'device.capacity["{DRA_DRIVER}"].{DRA_MEMORY}'
        if len(sizes) == 1:
            memory = {DRA_MEMORY: f"{sizes[0] * ask.mem_percent // 100}Mi"}
            request = {"name": REQUEST, "exactly": _exact(ask.nums, base, {**memory, **cores})}
            return _with_constraints({"requests": [request]}, ask)
        request = {"name": REQUEST, "firstAvailable": [
            {"name": f"mem{size}", **_exact(
                ask.nums, base + [f'{attr}.compareTo(quantity("{size}Mi")) == 0'],
                {DRA_MEMORY: f"{size * ask.mem_percent // 100}Mi", **cores})}
            for size in sizes]}
    return _with_constraints({"requests": [request]}, ask)


def _with_constraints(devices: dict, ask: ContainerRequest) -> dict:
    if ask.nums > 1:
        devices["constraints"] = [{"requests": [REQUEST],
                                   "distinctAttribute": f"{DRA_DRIVER}/uuid"}]
    return devices


def published_sizes(gpus, filters: DeviceFilters) -> list:
    """The distinct memory sizes (MiB) of the published GPUs, (type, UUID, MiB) triples, that
    the pod's type and UUID filters allow."""
    return sorted({mib for gpu_type, uuid, mib in gpus
                   if filters.type_ok(gpu_type) and filters.uuid_ok(uuid)})
