"""A real one-machine Kubernetes cluster (built from the release's own Go modules) running
hami-py as deploy/ describes it, over simulated GPUs: `hami-sim cluster up --real`."""
from hami_sim.realcluster.cluster import ClusterError, RealCluster

__all__ = ["ClusterError", "RealCluster"]
