"""hami-node as a DRA kubelet plugin: ResourceSlices for the node's GPUs, and the claims'
devices prepared as CDI devices that bring the shim with the claim's limits."""
