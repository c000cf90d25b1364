"""A container's shim settings and the environment that carries them (protocols.md section 5).

The node agent builds a container's environment with `ShimSettings(...).to_env()` (what HAMi's
device plugin puts in an Allocate response); hami-run adds the preload with `shim_env`. The
parsing side, `ShimSettings.from_env`, applies the same rules as the C shim (c/vgpu/env.c), so
a value the shim would refuse is refused here first, with the same variable named.
"""
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

from hami_node.shim.errors import ShimConfigError, ShimError
from hami_node.shim.layout import MAX_DEVICES, POLICY_NAMES
from hami_node.shim.sizes import env_size, parse_size

MEM_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT"
SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"
SHARED_CACHE = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
POLICY = "GPU_CORE_UTILIZATION_POLICY"
PRIORITY = "CUDA_TASK_PRIORITY"
LOG_LEVEL = "LIBCUDA_LOG_LEVEL"
CONTEXT_OVERHEAD = "HAMI_VGPU_CONTEXT_OVERHEAD"
# HAMI_VGPU_DEVICE_<tag>=<GPU UUID>,<memory>,<SM percent>: limits of one GPU by its UUID, under
# a tag of the writer's choosing (each DRA device its own, so claims never collide).
UUID_LIMIT = "HAMI_VGPU_DEVICE_"
_TAG = re.compile(r"[A-Za-z0-9_]+")
POLICIES = tuple(POLICY_NAMES.values())  # in the order of enum vgpu_policy
_INDEXED = re.compile(rf"({MEM_LIMIT}|{SM_LIMIT})_(.*)")


@dataclass(frozen=True)
class ShimSettings:
    """What the shim enforces for one container. None / empty means "not set"."""
    memory_limit: Optional[int] = None           # bytes, every device
    device_memory_limits: Dict[int, int] = field(default_factory=dict)  # ordinal -> bytes
    sm_limit: Optional[int] = None               # percent, every device
    device_sm_limits: Dict[int, int] = field(default_factory=dict)
    cache_path: Optional[str] = None             # the container's shared accounting file
    policy: str = "default"
    priority: Optional[int] = None
    log_level: Optional[int] = None
    context_overhead: Optional[int] = None       # bytes counted per CUDA context
    # tag -> (GPU UUID, bytes, SM percent); wins over the ordinal forms for that GPU
    uuid_limits: Dict[str, Tuple[str, int, int]] = field(default_factory=dict)

    def to_env(self) -> Dict[str, str]:
        """The environment variables for these settings (only those that are set)."""
        self.validate()
        env = {}
        if self.memory_limit is not None:
            env[MEM_LIMIT] = env_size(self.memory_limit)
        env.update({f"{MEM_LIMIT}_{i}": env_size(v) for i, v in self.device_memory_limits.items()})
        if self.sm_limit is not None:
            env[SM_LIMIT] = str(self.sm_limit)
        env.update({f"{SM_LIMIT}_{i}": str(v) for i, v in self.device_sm_limits.items()})
        if self.cache_path:
            env[SHARED_CACHE] = str(self.cache_path)
        if self.policy != "default":
            env[POLICY] = self.policy
        for name, value in ((PRIORITY, self.priority), (LOG_LEVEL, self.log_level)):
            if value is not None:
                env[name] = str(value)
        if self.context_overhead is not None:
            env[CONTEXT_OVERHEAD] = env_size(self.context_overhead)
        env.update({UUID_LIMIT + tag: f"{uuid},{env_size(mem)},{sm}"
                    for tag, (uuid, mem, sm) in self.uuid_limits.items()})
        return env

    def validate(self) -> None:
        """Raises ShimConfigError for values the shim would refuse."""
        for i in list(self.device_memory_limits) + list(self.device_sm_limits):
            if not 0 <= i < MAX_DEVICES:
                raise ShimConfigError(f"device index {i} must be from 0 to {MAX_DEVICES - 1}")
        for pct in [self.sm_limit] + list(self.device_sm_limits.values()):
            if pct is not None and pct < 0:
                raise ShimConfigError(f"SM limit {pct} must be a percentage (0 = no limit)")
        if self.policy not in POLICIES:
            raise ShimConfigError(f"{POLICY}={self.policy!r} must be one of {', '.join(POLICIES)}")
        if self.log_level is not None and not 0 <= self.log_level <= 4:
            raise ShimConfigError(f"{LOG_LEVEL}={self.log_level} must be 0 (errors) to 4 (debug)")
        for tag, (uuid, mem, sm) in self.uuid_limits.items():
            if not _TAG.fullmatch(tag) or not uuid.startswith(("GPU-", "MIG-")) or mem < 0 or \
                    sm < 0:
                raise ShimConfigError(f"{UUID_LIMIT}{tag}: needs a tag of letters, digits and _, "
                                      f"a GPU or MIG UUID and non-negative limits, got {uuid!r}, "
                                      f"{mem}, {sm}")
        if len({uuid for uuid, _, _ in self.uuid_limits.values()}) > MAX_DEVICES:
            raise ShimConfigError(f"{UUID_LIMIT}*: more than {MAX_DEVICES} GPUs")

    def uuid_limit(self, uuid: str) -> Optional[Tuple[int, int]]:
        """(bytes, SM percent) given for a GPU by its UUID (entries for one GPU add up), or
        None when none is given (the ordinal forms then apply)."""
        mine = [(mem, sm) for u, mem, sm in self.uuid_limits.values() if u == uuid]
        return (sum(m for m, _ in mine), sum(s for _, s in mine)) if mine else None

    def limit_for(self, ordinal: int) -> int:
        """The memory limit of a device as the application numbers it; 0 means none."""
        return self.device_memory_limits.get(ordinal, self.memory_limit or 0)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "ShimSettings":
        """Parses a container's environment; ShimConfigError names the first bad variable."""
        def size(name):
            return parse_size(env[name], name) if env.get(name) else None

        per_mem, per_sm = {}, {}
        for name, value in env.items():
            match = _INDEXED.fullmatch(name)
            if not match:
                continue
            index = match.group(2)
            if not (index.isascii() and index.isdigit() and int(index) < MAX_DEVICES):
                raise ShimConfigError(f"{name}={value!r}: the device index must be a number "
                                      f"from 0 to {MAX_DEVICES - 1}")
            if value and match.group(1) == MEM_LIMIT:
                per_mem[int(index)] = parse_size(value, name)
            elif value:
                per_sm[int(index)] = _percent(name, value)
        policy = (env.get(POLICY) or "default").lower()
        by_uuid = {name[len(UUID_LIMIT):]: _uuid_entry(name, value)
                   for name, value in env.items() if name.startswith(UUID_LIMIT)}
        settings = cls(memory_limit=size(MEM_LIMIT), device_memory_limits=per_mem,
                       sm_limit=_percent(SM_LIMIT, env[SM_LIMIT]) if env.get(SM_LIMIT) else None,
                       device_sm_limits=per_sm, cache_path=env.get(SHARED_CACHE) or None,
                       policy=policy, priority=_number(env, PRIORITY, 1000),
                       log_level=_number(env, LOG_LEVEL, 4),
                       context_overhead=size(CONTEXT_OVERHEAD), uuid_limits=by_uuid)
        settings.validate()
        return settings


def _uuid_entry(name: str, value: str) -> Tuple[str, int, int]:
    parts = value.split(",")
    if len(parts) != 3 or not parts[0].startswith("GPU-"):
        raise ShimConfigError(f"{name}={value!r}: expected <GPU UUID>,<memory>,<SM percent>, "
                              "e.g. GPU-0fc3...,3000m,30")
    return parts[0], parse_size(parts[1], name), _percent(name, parts[2])


def _percent(name: str, text: str) -> int:
    if not (text.isascii() and text.isdigit() and int(text) <= 1_000_000):
        raise ShimConfigError(f"{name}={text!r} is not a percentage (0..100, 0 = no limit)")
    return int(text)


def _number(env: Mapping[str, str], name: str, top: int) -> Optional[int]:
    text = env.get(name)
    if not text:
        return None
    if not (text.isascii() and text.isdigit() and int(text) <= top):
        raise ShimConfigError(f"{name}={text!r} must be a number from 0 to {top}")
    return int(text)


CACHE_NAME = "vgpu.cache"       # the shared file's name in its directory (c/vgpu/env.c's too)


def default_cache_path(env: Optional[Mapping[str, str]] = None) -> Path:
    """The shared file a process uses when CUDA_DEVICE_MEMORY_SHARED_CACHE is unset: one per
    user, ${TMPDIR:-/tmp}/hami-vgpu-<uid>/vgpu.cache (the rule of c/vgpu/env.c)."""
    env = os.environ if env is None else env
    return Path(env.get("TMPDIR") or "/tmp") / f"hami-vgpu-{os.getuid()}" / CACHE_NAME


def cache_path_of(env: Optional[Mapping[str, str]] = None) -> Path:
    """The shared file an environment selects."""
    env = os.environ if env is None else env
    return Path(env[SHARED_CACHE]) if env.get(SHARED_CACHE) else default_cache_path(env)


def lib_path() -> Path:
    """The built libvgpu.so (hami_node/shim/lib); ShimError when it is not built."""
    path = Path(__file__).resolve().parent / "lib" / "libvgpu.so"
    if not path.is_file():
        raise ShimError(f"libvgpu.so is not built ({path} missing); run `make native` "
                        "(or `make -C c`)")
    return path


def shim_env(settings: ShimSettings, base: Optional[Mapping[str, str]] = None,
             lib: Optional[Path] = None) -> Dict[str, str]:
    """A copy of `base` (default os.environ) that runs a child under the shim with `settings`:
    the settings' variables, and libvgpu.so first on LD_PRELOAD."""
    env = dict(os.environ if base is None else base)
    env.update(settings.to_env())
    shim = str(lib or lib_path())
    rest = [p for p in env.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p and p != shim]
    env["LD_PRELOAD"] = ":".join([shim] + rest)
    return env
