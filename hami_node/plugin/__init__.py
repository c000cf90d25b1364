"""hami-node: the device plugin daemon for GPU nodes."""
