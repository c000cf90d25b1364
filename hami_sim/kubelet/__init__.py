"""The kubelet double: device plugin Registration, ListAndWatch, Allocate per container and
pod admission for one node. `KubeletDouble` is the Python API; `hami-sim kubelet` the
command."""
from .kubelet import KubeletDouble
from .records import AllocationFailure, ContainerAllocation, load_allocation

__all__ = ["KubeletDouble", "AllocationFailure", "ContainerAllocation", "load_allocation"]
