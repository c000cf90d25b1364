"""What a pod asks of the GPUs: parse a v1.Pod (as a dict) into a PodRequest.

The webhook, the scheduler extender, the trace replay and the node agent all parse pods here, so
that HAMi's defaults are applied in one place:
- no memory given -> `default_memory` MiB if set, else 100% of each GPU;
- `nvidia.com/gpu` without `gpucores`, with memory unset or at 100% -> the card exclusively
  (cores 100);
- memory or cores given without `nvidia.com/gpu` -> `default_gpu_num` GPUs.
Values that cannot be honoured raise RequestError with a message that says what to change.
"""
from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping, Optional

from hami_common import constants as C
from hami_common.errors import HamiFormatError, RequestError
from hami_common.podshape import pod_problem
from hami_common.quantity import MIB, cpu_millis, has_binary_unit, memory_mib, parse_quantity

_TRUE = ("true", "1", "t", "yes")
_FALSE = ("false", "0", "f", "no", "")


@dataclass(frozen=True)
class RequestDefaults:
    """The node/scheduler configuration knobs that fill in what a container leaves out."""

    default_memory: int = 0      # MiB per GPU when none is asked; 0 means the whole card (100%)
    default_cores: int = 0       # percent of SMs when none is asked
    default_gpu_num: int = 1     # GPUs when memory or cores are asked without a count

    def __post_init__(self):
        if self.default_memory < 0 or not 0 <= self.default_cores <= 100 \
                or self.default_gpu_num < 0:
            raise RequestError("request defaults out of range: default_memory >= 0, "
                               "0 <= default_cores <= 100, default_gpu_num >= 0")


@dataclass(frozen=True)
class ContainerRequest:
    """One container's GPU ask, defaults applied. `nums == 0`: the container uses no GPU."""

    name: str
    init: bool = False          # an init container that runs (and ends) before the others
    nums: int = 0
    mem_mib: int = 0            # MiB per GPU; 0 means "use mem_percent"
    mem_percent: int = 0        # percent of each GPU's memory, used when mem_mib is 0
    cores: int = 0              # percent of SMs per GPU; 100 = the card exclusively
    priority: Optional[int] = None

    def memory_on(self, devmem: int) -> int:
        """MiB this container takes on a GPU with `devmem` MiB (HAMi rounds percentages down)."""
        return self.mem_mib if self.mem_mib else devmem * self.mem_percent // 100

    @property
    def shape(self) -> tuple:
        """What placement depends on (name and priority excluded)."""
        return (self.init, self.nums, self.mem_mib, self.mem_percent, self.cores)


@dataclass(frozen=True)
class DeviceFilters:
    """The pod's GPU selection annotations, normalised."""

    use_types: tuple = ()       # lower case; a device type must contain one of them
    nouse_types: tuple = ()     # lower case; a device type must contain none of them
    use_uuids: frozenset = frozenset()
    nouse_uuids: frozenset = frozenset()
    numa_bind: bool = False
    modes: frozenset = frozenset((C.DEVICE_MODE_HAMI_CORE,))   # nvidia.com/vgpu-mode

    @property
    def mig(self) -> bool:
        """Whether the pod may get MIG instances."""
        return C.DEVICE_MODE_MIG in self.modes

    def type_ok(self, device_type: str) -> bool:
        """HAMi's rule: case-insensitive substring match on the registered type."""
        lowered = device_type.lower()
        if self.use_types and not any(t in lowered for t in self.use_types):
            return False
        return not any(t in lowered for t in self.nouse_types)

    def uuid_ok(self, uuid: str) -> bool:
        """Exact UUID allow/deny lists."""
        if self.use_uuids and uuid not in self.use_uuids:
            return False
        return uuid not in self.nouse_uuids


@dataclass(frozen=True)
class PodRequest:
    """A pod's placement request: per container (init containers first) and pod-wide settings."""

    namespace: str
    name: str
    uid: str = ""
    containers: tuple = ()
    filters: DeviceFilters = field(default_factory=DeviceFilters)
    node_policy: Optional[str] = None
    gpu_policy: Optional[str] = None
    cpu_milli: int = 0          # what kube-scheduler's resource fit counts for the pod
    memory_mib: int = 0

    @property
    def key(self) -> str:
        """namespace/name, the pod's identity in the cluster view."""
        return f"{self.namespace}/{self.name}"

    @property
    def wants_gpu(self) -> bool:
        """Whether any container asks for a GPU."""
        return any(c.nums for c in self.containers)

    @cached_property
    def signature(self) -> tuple:
        """Everything placement depends on; two requests with equal signatures place alike."""
        return (tuple(c.shape for c in self.containers), self.filters, self.node_policy,
                self.gpu_policy, self.cpu_milli, self.memory_mib)

    def gpu_share(self) -> float:
        """GPUs asked for, counting each GPU by its cores share (a whole card is 1.0)."""
        return sum(c.nums * c.cores for c in self.containers if not c.init) / 100.0


def _lookup(resources: Mapping, key: str):
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if key in values:
            return values[key]
    return None


def _gpu_int(container: str, key: str, raw) -> int:
    """A GPU resource value as a non-negative integer. gpumem is MiB as HAMi reads it (so the
    API server's canonical "3k" is 3000 MiB); with a binary unit ("2Gi") it is bytes -> MiB."""
    try:
        value = parse_quantity(raw)
    except HamiFormatError as e:
        raise RequestError(f"container {container!r}: {key} {raw!r} is not a number") from e
    if key == C.RESOURCE_MEM and has_binary_unit(raw):
        if value % MIB:
            raise RequestError(f"container {container!r}: {key} {raw!r} is not a whole number "
                               "of MiB; give MiB as a plain integer, e.g. 3000")
        value = value / MIB
    if value.denominator != 1:
        raise RequestError(f"container {container!r}: {key} must be a whole number, got {raw!r}")
    if value < 0:
        raise RequestError(f"container {container!r}: {key} must not be negative, got {raw!r}")
    return int(value)


def _read_gpu_values(name: str, resources: Mapping) -> dict:
    values = {}
    for key in C.GPU_RESOURCES:
        raw = _lookup(resources, key)
        if raw is not None:
            values[key] = _gpu_int(name, key, raw)
    return values


def _check_ranges(name: str, v: dict) -> None:
    if not 1 <= v.get(C.RESOURCE_MEM_PERCENTAGE, 1) <= 100:   # 0 would be taken as unset
        raise RequestError(f"container {name!r}: {C.RESOURCE_MEM_PERCENTAGE} is "
                           f"{v[C.RESOURCE_MEM_PERCENTAGE]}, it must be between 1 and 100")
    if v.get(C.RESOURCE_CORES, 0) > 100:
        raise RequestError(f"container {name!r}: {C.RESOURCE_CORES} is {v[C.RESOURCE_CORES]}, "
                           "it must be between 0 and 100 (100 = the whole card)")
    if v.get(C.RESOURCE_MEM, 0) and v.get(C.RESOURCE_MEM_PERCENTAGE, 0):
        raise RequestError(f"container {name!r}: set only one of {C.RESOURCE_MEM} and "
                           f"{C.RESOURCE_MEM_PERCENTAGE}")


def parse_container(ctr: Mapping, init: bool = False,
                    defaults: RequestDefaults = RequestDefaults()) -> ContainerRequest:
    """One container's GPU request with HAMi's defaults applied."""
    name = str(ctr.get("name", ""))
    v = _read_gpu_values(name, (ctr.get("resources") or {}))
    _check_ranges(name, v)
    sizing = {k: v[k] for k in (C.RESOURCE_MEM, C.RESOURCE_MEM_PERCENTAGE, C.RESOURCE_CORES)
              if k in v}
    nums = v.get(C.RESOURCE_GPU)
    if nums is None:
        nums = defaults.default_gpu_num if sizing else 0
    elif nums == 0 and any(sizing.values()):
        raise RequestError(f"container {name!r} asks for 0 GPUs ({C.RESOURCE_GPU}) but sets "
                           f"{', '.join(sorted(sizing))}; remove them or ask for at least 1 GPU")
    if nums == 0:
        return ContainerRequest(name=name, init=init)
    mem, pct = v.get(C.RESOURCE_MEM, 0), v.get(C.RESOURCE_MEM_PERCENTAGE, 0)
    if not mem and not pct:
        mem, pct = (defaults.default_memory, 0) if defaults.default_memory else (0, 100)
    if C.RESOURCE_CORES in v:
        cores = v[C.RESOURCE_CORES]
    elif (C.RESOURCE_MEM_PERCENTAGE in v and v[C.RESOURCE_MEM_PERCENTAGE] == 100) or \
            (C.RESOURCE_MEM_PERCENTAGE not in v and C.RESOURCE_MEM not in v):
        cores = 100      # a bare GPU (or 100% of its memory) is the card exclusively
    else:
        cores = defaults.default_cores
    return ContainerRequest(name=name, init=init, nums=nums, mem_mib=mem, mem_percent=pct,
                            cores=cores, priority=v.get(C.RESOURCE_PRIORITY))


def _split_list(value: str, lower: bool) -> tuple:
    items = [s.strip() for s in value.split(",") if s.strip()]
    return tuple(s.lower() for s in items) if lower else tuple(items)


MODES = (C.DEVICE_MODE_HAMI_CORE, C.DEVICE_MODE_MIG)


def parse_modes(value: str) -> frozenset:
    """`nvidia.com/vgpu-mode`: the GPU modes the pod accepts (HAMi's values, comma-separated;
    unset: hami-core slices only). RequestError names a value hami-py does not serve."""
    modes = frozenset(_split_list(value, True))
    bad = sorted(modes - set(MODES))
    if bad:
        raise RequestError(f"annotation {C.ANNO_VGPU_MODE} is {value!r}: {', '.join(bad)} is "
                           f"not a mode hami-py serves; use {' or '.join(MODES)}")
    return modes or frozenset((C.DEVICE_MODE_HAMI_CORE,))


def parse_filters(annotations: Mapping) -> DeviceFilters:
    """The pod's type/UUID/NUMA/mode selection annotations."""
    numa_text = str(annotations.get(C.ANNO_NUMA_BIND, "")).strip().lower()
    if numa_text not in _TRUE + _FALSE:
        raise RequestError(f"annotation {C.ANNO_NUMA_BIND} is {numa_text!r}; use \"true\" or "
                           "\"false\"")
    return DeviceFilters(
        use_types=_split_list(annotations.get(C.ANNO_USE_GPUTYPE, ""), True),
        nouse_types=_split_list(annotations.get(C.ANNO_NOUSE_GPUTYPE, ""), True),
        use_uuids=frozenset(_split_list(annotations.get(C.ANNO_USE_GPUUUID, ""), False)),
        nouse_uuids=frozenset(_split_list(annotations.get(C.ANNO_NOUSE_GPUUUID, ""), False)),
        numa_bind=numa_text in _TRUE,
        modes=parse_modes(str(annotations.get(C.ANNO_VGPU_MODE, ""))))


def _cpu_mem(values: Mapping, where: str) -> tuple:
    try:
        cpu, mem = values.get("cpu"), values.get("memory")
        return (cpu_millis(cpu) if cpu is not None else 0,
                memory_mib(mem) if mem is not None else 0)
    except HamiFormatError as e:
        raise RequestError(f"{where}: {e}") from e


def _container_cpu_mem(ctr: Mapping) -> tuple:
    resources = ctr.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    # The API server defaults a request to its limit.
    return _cpu_mem({key: requests.get(key, limits.get(key)) for key in ("cpu", "memory")},
                    f"container {ctr.get('name', '')!r}")


def _is_sidecar(ctr: Mapping) -> bool:
    return ctr.get("restartPolicy") == "Always"


def _pod_cpu_mem(spec: Mapping) -> tuple:
    """kube-scheduler's effective request: max(sum of regular+sidecar, each init on top of the
    sidecars started before it), plus the pod's overhead (its RuntimeClass's)."""
    cpu = mem = side_cpu = side_mem = peak_cpu = peak_mem = 0
    for ctr in spec.get("initContainers") or []:
        c, m = _container_cpu_mem(ctr)
        if _is_sidecar(ctr):
            side_cpu, side_mem = side_cpu + c, side_mem + m
        else:
            peak_cpu, peak_mem = max(peak_cpu, side_cpu + c), max(peak_mem, side_mem + m)
    for ctr in spec.get("containers") or []:
        c, m = _container_cpu_mem(ctr)
        cpu, mem = cpu + c, mem + m
    over_cpu, over_mem = _cpu_mem(spec.get("overhead") or {}, "spec.overhead")
    return max(cpu + side_cpu, peak_cpu) + over_cpu, max(mem + side_mem, peak_mem) + over_mem


def pod_cpu_memory(pod: Mapping) -> tuple:
    """(millicores, MiB) that kube-scheduler counts for a pod; RequestError names what to fix
    (a malformed quantity, a field of the wrong type)."""
    problem = pod_problem(pod)
    if problem:
        raise RequestError(problem)
    return _pod_cpu_mem(pod.get("spec") or {})


def parse_pod(pod: Mapping, defaults: RequestDefaults = RequestDefaults()) -> PodRequest:
    """The PodRequest for a v1.Pod given as the dict the API server sends; RequestError names
    what to fix, a field of the wrong type included."""
    problem = pod_problem(pod)
    if problem:
        raise RequestError(problem)
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    init_ctrs, app_ctrs = spec.get("initContainers") or [], spec.get("containers") or []
    containers = tuple(parse_container(c, init=not _is_sidecar(c), defaults=defaults)
                       for c in init_ctrs) + \
        tuple(parse_container(c, defaults=defaults) for c in app_ctrs)
    cpu, mem = _pod_cpu_mem(spec)
    return PodRequest(
        namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""), containers=containers, filters=parse_filters(annotations),
        node_policy=annotations.get(C.ANNO_NODE_SCHEDULER_POLICY) or None,
        gpu_policy=annotations.get(C.ANNO_GPU_SCHEDULER_POLICY) or None,
        cpu_milli=cpu, memory_mib=mem)
