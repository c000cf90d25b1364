"""Where the simulated driver lives and the environment that selects it for a child process.

The simulated libcuda.so.1 / libnvidia-ml.so.1 are found by soname through LD_LIBRARY_PATH,
exactly as cuda-python and pynvml find the real ones. Configuration is read by the libraries:
HAMI_SIM_GPUS (devices), HAMI_SIM_STATE (shared state directory), HAMI_SIM_UUID_SEED (distinct
UUIDs for several simulated nodes), HAMI_SIM_CTX_OVERHEAD (device memory per context),
HAMI_SIM_VISIBLE_DEVICES (the devices a container runtime exposes).
"""
import os
from pathlib import Path
from typing import Iterable, Mapping, Optional, Union

LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")


class SimGpuError(Exception):
    """The simulated GPU cannot be used (libraries not built, bad configuration...)."""


def lib_dir() -> Path:
    """The folder holding the built simulated libraries (hami_sim/lib)."""
    path = Path(__file__).resolve().parent.parent / "lib"
    missing = [name for name in LIBRARIES if not (path / name).is_file()]
    if missing:
        raise SimGpuError(f"simulated driver not built: {', '.join(missing)} missing in {path}; "
                          "run `make native` (or `make -C c`)")
    return path


def default_state_dir(base: Optional[Mapping[str, str]] = None) -> Path:
    """The state directory the libraries use when HAMI_SIM_STATE is unset (per user)."""
    env = os.environ if base is None else base
    tmp = env.get("TMPDIR") or "/tmp"  # the same rule as the C side (state.c)
    return Path(tmp) / f"hami-sim-{os.getuid()}"


def _gpus_text(gpus: Union[str, Iterable[str]]) -> str:
    text = gpus if isinstance(gpus, str) else ",".join(gpus)
    if not text.strip():
        raise SimGpuError("gpus: give at least one device spec MEMORY[/SMS[/NAME]], e.g. '16g'")
    return text


def sim_env(gpus: Union[str, Iterable[str], None] = None, state_dir: Union[str, Path, None] = None,
            base: Optional[Mapping[str, str]] = None, uuid_seed: Optional[str] = None,
            ctx_overhead: Optional[str] = None, module_memory: Optional[str] = None,
            visible: Union[str, Iterable[Union[str, int]], None] = None) -> dict:
    """A copy of `base` (default os.environ) that runs a child against the simulated GPUs.

    gpus: HAMI_SIM_GPUS text or a list of device specs ("16g/108/NVIDIA A100-SXM4-40GB");
    None keeps what `base` says (or the libraries' default). The simulated library folder
    goes first on LD_LIBRARY_PATH. Other arguments set HAMI_SIM_STATE, HAMI_SIM_UUID_SEED,
    HAMI_SIM_CTX_OVERHEAD (device memory per context; unset: the model's realistic default)
    and HAMI_SIM_MODULE_MEM (module memory at a context's first launch) when given. visible: the devices a container runtime would
    expose (indices or UUIDs, as text or a list) -> HAMI_SIM_VISIBLE_DEVICES; both simulated
    libraries then see only those, renumbered from 0.
    """
    env = dict(os.environ if base is None else base)
    libs = str(lib_dir())
    rest = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p and p != libs]
    env["LD_LIBRARY_PATH"] = ":".join([libs] + rest)
    if gpus is not None:
        env["HAMI_SIM_GPUS"] = _gpus_text(gpus)
    if state_dir is not None:
        env["HAMI_SIM_STATE"] = str(state_dir)
    if uuid_seed is not None:
        env["HAMI_SIM_UUID_SEED"] = uuid_seed
    if ctx_overhead is not None:
        env["HAMI_SIM_CTX_OVERHEAD"] = ctx_overhead
    if module_memory is not None:
        env["HAMI_SIM_MODULE_MEM"] = module_memory
    if visible is not None:
        env["HAMI_SIM_VISIBLE_DEVICES"] = (visible if isinstance(visible, str)
                                           else ",".join(str(v) for v in visible))
    return env


def state_dir_of(env: Optional[Mapping[str, str]] = None) -> Path:
    """The state directory an environment selects (HAMI_SIM_STATE or the default)."""
    env = os.environ if env is None else env
    return Path(env["HAMI_SIM_STATE"]) if env.get("HAMI_SIM_STATE") else default_state_dir(env)
