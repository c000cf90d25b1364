"""The simulated NVIDIA GPU: locate its libraries, build child environments, read its state."""
from hami_sim.gpu.env import SimGpuError, default_state_dir, lib_dir, sim_env

__all__ = ["SimGpuError", "default_state_dir", "lib_dir", "sim_env"]
