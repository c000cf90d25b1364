"""The packing curve as a PNG: GPU allocation ratio against arrived GPU demand, one line per
policy (as the FGD paper draws it), with the paper's published figures at 100 % arrived demand
marked beside them when the pod list is one of a shipped trace's.

Used by `hami-sim replay --plot` and bench/replay_plot.py. Needs matplotlib (the `bench`
extra, also in `test`)."""
from __future__ import annotations

import re
from pathlib import Path

from hami_sim.replay.catalog import TRACES_DIR

class PlotError(RuntimeError):
    """The plot cannot be drawn (matplotlib missing)."""


def published(pods_file: str) -> dict:
    """{column: figure} of the FGD paper for a shipped pod list (from its trace's README
    table, the one place the figures are written down); {} for any other list."""
    path = Path(pods_file).resolve()
    match = re.fullmatch(r"(.+)_pod_list_(.+)\.csv", path.name)
    readme = path.parent / "README.md"
    if not match or path.parent.parent != TRACES_DIR or not readme.is_file():
        return {}
    lines = readme.read_text().splitlines()
    header = next((ln for ln in lines if ln.startswith("| workload |")), None)
    row = next((ln for ln in lines if ln.startswith(f"| {match.group(2)} |")), None)
    if header is None or row is None:
        return {}
    names = [c.strip() for c in header.strip("|").split("|")][1:]
    values = [c.strip() for c in row.strip("|").split("|")][1:]
    return {n: float(v) for n, v in zip(names, values)}


def plot(summaries, out: str, title: str, marks: dict | None = None) -> str:
    """One line per policy: allocation % against arrived demand %, the 100 % mark, and the
    published figures (marks: {name: %}) of the policies drawn, as points at 100 % in the
    line's colour. Returns the path written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotError("the plot needs matplotlib: pip install 'hami-py[bench]'") from e
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {}
    for s in summaries:
        xs = [x for x, y in enumerate(s["curve"]) if y is not None]
        line, = ax.plot(xs, [s["curve"][x] for x in xs],
                        label=f"{s['policy']} ({s['gpu_alloc_pct']:.2f}%)", linewidth=1.4)
        colours[s["policy"].lower()] = line.get_color()
    for name, value in (marks or {}).items():     # only the policies drawn: no clutter
        colour = colours.get(name.lower())
        if colour is not None:
            ax.plot([100], [value], marker="D", markersize=5, color=colour,
                    label=f"{name}, published {value:.2f}%", linestyle="none")
    ax.plot([0, 100], [0, 100], color="grey", linewidth=0.6, linestyle=":")
    ax.axvline(100, color="grey", linewidth=0.6, linestyle="--")
    ax.set_xlim(70, max(len(s["curve"]) for s in summaries) - 1)
    ax.set_ylim(70, 100)
    ax.set_xlabel("arrived GPU demand (% of cluster GPUs)")
    ax.set_ylabel("GPU allocation ratio (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out

