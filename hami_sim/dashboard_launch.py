"""The dashboard of a launched hami-control (the simulated and the real-cluster `cluster up`):
the flags that turn it on, where the node agents' metrics are, and the page's address.

    extra_args += dashboard_args(root)          # before starting hami-control
    url = dashboard_url(control)                # its second stdout line
    write_node_metrics(root, {node.name: node.metrics_url for node in nodes})
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from hami_sim.launch import read_first_line

SCRAPE_PERIOD_S = 1.0       # a small cluster: scrape often, so the page follows at once


def node_metrics_file(root: Path) -> Path:
    """The JSON file node -> agent /metrics URL that hami-control reads."""
    return Path(root) / "node-metrics.json"


def dashboard_args(root: Path, listen: str = "127.0.0.1:0") -> list:
    """hami-control's dashboard flags (the node metrics file is created empty here, filled
    by write_node_metrics once the agents serve)."""
    path = node_metrics_file(root)
    if not path.exists():
        write_node_metrics(root, {})
    return ["--dashboard-listen", listen, "--dashboard-node-metrics", f"@{path}",
            "--dashboard-scrape-period", str(SCRAPE_PERIOD_S)]


def write_node_metrics(root: Path, urls: dict) -> None:
    """Writes node -> URL atomically (hami-control may read it at any moment)."""
    path = node_metrics_file(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({k: v for k, v in urls.items() if v}))
    os.replace(tmp, path)


def dashboard_url(control, timeout: float = 10.0) -> str:
    """The page's address, from the `dashboard URL` line hami-control prints after `serving`
    ('' when it printed none)."""
    if control.process is None:
        plane = control.plane
        return f"{plane.dashboard.url}/" if plane is not None and plane.dashboard else ""
    line = read_first_line(control.process, timeout)
    return line.split()[1] if line.startswith("dashboard ") else ""
