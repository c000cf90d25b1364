"""hami-control's read-only dashboard: a web page on its own listener (--dashboard-listen) that
shows the nodes and GPUs, the pods on them with their allocations and measured use, the
pending pods with the extender's reasons, and recent events; it polls a JSON snapshot
(snapshot.py) once a second. Nothing it serves changes the cluster, and it carries no secrets:
only what hami-control's view and the node agents' metrics already hold."""
from hami_control.dashboard.server import Dashboard

__all__ = ["Dashboard"]
