"""`hami-sim demo`: for now, the tour of the simulated GPUs (gpu_tour)."""
from typing import List, Optional

from hami_sim.demo import gpu_tour


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the demo; see `hami-sim demo --help`."""
    return gpu_tour.main(argv or [])
