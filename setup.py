"""hami-py: GPU sharing for Kubernetes and bare-metal GPU nodes (Python with a small C core)."""
import subprocess
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithNative(build_py):
    """Builds the C libraries (c/) with the system compiler before copying the packages."""

    def run(self):
        subprocess.check_call(["make", "-s", "-C", str(ROOT / "c")])
        super().run()


setup(
    name="hami-py",
    version="0.1.0",
    description="GPU sharing for Kubernetes and bare-metal GPU nodes: memory and compute "
    "limits per container, a device plugin, a scheduler extender",
    python_requires=">=3.10",
    packages=find_packages(include=["hami_*", "hami_*.*"]),
    package_data={
        # The shipped traces: `hami-sim replay --trace openb --pods default` reads them here.
        "hami_sim": ["lib/*.so*", "data/traces/*/*.csv", "data/traces/*/*.md"],
        "hami_node.shim": ["lib/*.so*"],
        "hami_common.deviceplugin": ["*.proto"],
        "hami_common.draplugin": ["*.proto"],
        "hami_control.dashboard": ["static/*"],
    },
    include_package_data=True,
    install_requires=[
        "cuda-python>=12.6,<14",
        "nvidia-ml-py>=12.560,<14",
        "grpcio>=1.85.1,<2",
        "protobuf>=7.35.1,<8",
        "kubernetes>=29,<38",
        "bottle>=0.13,<0.14",
        "cheroot>=10,<12",
        "psutil>=5.9,<8",
        "prometheus-client>=0.19,<1",
        "PyYAML>=6,<7",
        "numpy>=1.26,<3",
    ],
    extras_require={
        "test": ["pytest>=8,<10", "pytest-timeout>=2.2,<3", "hypothesis>=6.100,<7",
                 "grpcio-tools>=1.60,<2",
                 # nvml.h, cuda.h and cudaTypedefs.h for the header conformance tests
                 # (tests/sim/test_headers.py): the real headers, no CUDA toolkit needed
                 "nvidia-nvml-dev>=12.4,<14", "nvidia-cuda-runtime>=13.0,<14",
                 # NVIDIA's CUDA runtime 12 beside 13 (the 13 one brings the headers above):
                 # tests/sim/test_cudart.py starts both on the simulated driver
                 "nvidia-cuda-runtime-cu12>=12.4,<13",
                 # the packing curve of `hami-sim replay --plot` (tests/unit/test_replay_plot.py)
                 "matplotlib>=3.8,<4"],
        "bench": ["matplotlib>=3.8,<4"],
    },
    entry_points={
        "console_scripts": [
            "hami-sim=hami_sim.cli:main",
            "hami-run=hami_node.shim.run:main",
            "hami-smi=hami_node.shim.smi:main",
            "hami-node=hami_node.plugin.cli:main",
            "hami-control=hami_control.cli:main",
        ]
    },
    cmdclass={"build_py": BuildWithNative},
)
