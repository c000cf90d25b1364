"""The node side: the shim (memory and compute limits in the container) and the device plugin daemon."""
