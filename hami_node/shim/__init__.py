"""The Python side of the libvgpu shim (c/vgpu): settings and the environment that carries
them, reading a container's shared accounting file, and the hami-run / hami-smi tools.

For the node agent and the demo:
    ShimSettings(memory_limit=..., sm_limit=..., cache_path=...).to_env()  # container env
    shim_env(settings, base)        # the same plus LD_PRELOAD of libvgpu.so (bare metal)
    read_usage(path)                # per device limit / used / peak, per process used
Nothing here imports more than the standard library (tests/gpu and GPU nodes rely on it).
"""
from hami_node.shim.errors import CacheFileError, ShimConfigError, ShimError
from hami_node.shim.settings import (ShimSettings, cache_path_of, default_cache_path, lib_path,
                                     shim_env)
from hami_node.shim.sizes import parse_size
from hami_node.shim.usage import CacheSnapshot, DeviceUsage, ProcessUsage, read_usage

__all__ = ["CacheFileError", "CacheSnapshot", "DeviceUsage", "ProcessUsage", "ShimConfigError",
           "ShimError", "ShimSettings", "cache_path_of", "default_cache_path", "lib_path",
           "parse_size", "read_usage", "shim_env"]
