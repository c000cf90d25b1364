"""The simulated cluster's own fixtures (the same ones other tiers import)."""
from hami_sim.testing import *  # noqa: F401,F403
