"""Everything simulated: the GPU driver double, the Kubernetes API server and kubelet doubles,
the trace replay and the demo cluster."""
