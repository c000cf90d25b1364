"""An independent auditor of a running cluster (the soak's judge): it reads only what the
API server, the simulated GPUs' driver, the host's cgroups, the shim folder and hami-node's
/metrics expose, never hami-control's memory, and reports every rule broken."""
