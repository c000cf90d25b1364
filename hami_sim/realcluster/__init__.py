"""A real one-machine Kubernetes cluster (built from the release's own Go modules) running
hami-py as deploy/ describes it, over simulated GPUs: `hami-sim cluster up --real`.
The cluster is hami_sim.realcluster.cluster.RealCluster. (Nothing is imported here: the
watchdog runs `python -m hami_sim.realcluster.reaper`.)"""
