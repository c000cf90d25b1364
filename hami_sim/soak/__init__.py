"""The soak with chaos: the openb mix of pods created and deleted at a steady rate on the real
cluster while faults hit it, judged by the independent auditor (hami_sim.audit)."""
