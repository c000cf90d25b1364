"""Python side of the libvgpu shim: hami-run, hami-smi and the shared-file layout mirror."""
