"""The traces shipped with the package (hami_sim/data/traces/<trace>/), found by short name.

`--trace openb --pods default` names openb_pod_list_default.csv of the openb trace; anything
that looks like a path (a separator, a .csv suffix, or an existing file) is taken as a path,
so the artifact's other lists work without being shipped.
"""
from __future__ import annotations

from pathlib import Path

from hami_sim.replay.trace import TraceError

# Inside the package so that an editable install, a wheel and a fresh clone all find it.
TRACES_DIR = Path(__file__).resolve().parent.parent / "data" / "traces"
DEFAULT_TRACE = "openb"
DEFAULT_PODS = "default"
_NODE_FILE = "{trace}_node_list_gpu_node.csv"
_POD_PREFIX = "{trace}_pod_list_"


def traces() -> list:
    """The shipped traces' short names."""
    if not TRACES_DIR.is_dir():
        return []
    return sorted(p.name for p in TRACES_DIR.iterdir() if p.is_dir())


def _trace_dir(trace: str) -> Path:
    folder = TRACES_DIR / trace
    if not folder.is_dir():
        raise TraceError(f"no shipped trace {trace!r} (shipped: {', '.join(traces()) or 'none'}"
                         f"; give --nodes and --pods as paths instead)")
    return folder


def pod_lists(trace: str = DEFAULT_TRACE) -> list:
    """The short names of a shipped trace's pod lists (`default`, `gpushare40`, ...)."""
    prefix = _POD_PREFIX.format(trace=trace)
    return sorted(p.name[len(prefix):-len(".csv")]
                  for p in _trace_dir(trace).glob(prefix + "*.csv"))


def _is_path(text: str) -> bool:
    return "/" in text or text.endswith(".csv") or Path(text).is_file()


def nodes_path(trace: str = DEFAULT_TRACE, nodes: str | None = None) -> str:
    """The node list: `nodes` when given (a path), else the shipped trace's GPU node list."""
    if nodes:
        return nodes
    return str(_trace_dir(trace) / _NODE_FILE.format(trace=trace))


def pods_path(trace: str = DEFAULT_TRACE, pods: str = DEFAULT_PODS) -> str:
    """A pod list: a path as given, or the shipped list of that short name."""
    if _is_path(pods):
        return pods
    path = _trace_dir(trace) / f"{_POD_PREFIX.format(trace=trace)}{pods}.csv"
    if not path.is_file():
        raise TraceError(f"trace {trace!r} ships no pod list {pods!r} (it has "
                         f"{', '.join(pod_lists(trace))}); give a path for the others")
    return str(path)


def add_arguments(parser, pods_flag: str = "--pods") -> None:
    """--trace, --nodes and the pod-list flag, as `hami-sim replay` and the benchmarks take
    them."""
    parser.add_argument("--trace", default=DEFAULT_TRACE,
                        help=f"shipped trace that the lists default to (default {DEFAULT_TRACE}"
                        f"; shipped: {', '.join(traces())})")
    parser.add_argument("--nodes", help="node list CSV (sn,cpu_milli,memory_mib,gpu,model); "
                        "default: the trace's GPU node list")
    parser.add_argument(pods_flag, default=DEFAULT_PODS,
                        help="pod list: a short name of the trace's lists (default, gpushare40, "
                        "multigpu20, gpuspec10) or a CSV path (name,cpu_milli,memory_mib,"
                        f"num_gpu,gpu_milli[,gpu_spec]); default: {DEFAULT_PODS}")


def resolve(args, pods_attr: str = "pods") -> tuple:
    """(node list path, pod list path) of parsed add_arguments() flags; raises TraceError."""
    return (nodes_path(args.trace, args.nodes),
            pods_path(args.trace, getattr(args, pods_attr)))
