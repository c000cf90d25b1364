"""What a Grafana dashboard's PromQL reads, and what a /metrics exposition offers: for the
check that deploy/grafana/ asks only for metrics the components really export (its `# TYPE`
lines, so a family without samples yet, say an XID counter, counts too)."""
from __future__ import annotations

import json
import re
import ssl
import urllib.request

from browserhelpers import REPO

DASHBOARDS = sorted((REPO / "deploy" / "grafana").glob("*.json"))
# PromQL words that are not metric names.
_KEYWORDS = {"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk",
             "quantile", "count_values", "group", "by", "without", "on", "ignoring",
             "group_left", "group_right", "and", "or", "unless", "bool", "offset",
             "vector", "rate", "irate", "increase", "delta", "histogram_quantile",
             "label_values", "abs", "clamp_min", "clamp_max"}


def exported_names(text: str) -> set:
    """Sample names an exposition can carry, from its `# TYPE` lines."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum",
                    "_count", "_created"), "summary": ("_sum", "_count", "_created")}
        names |= {name} | {name + s for s in suffixes.get(kind, ())}
    return names


def metric_names(expr: str) -> set:
    """The metric names a PromQL expression reads."""
    text = re.sub(r'"[^"]*"', "", expr)                      # label values, strings
    text = re.sub(r"\{[^}]*\}", "", text)                    # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)                   # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    words = [m.group(0) for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text)
             if not text[m.end():].lstrip().startswith("(")]      # not a function call
    return {w for w in words if w not in _KEYWORDS}


def queries(dashboard: dict) -> list:
    found = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for v in dashboard["templating"]["list"]:      # label_values(METRIC, label): the metric
        if isinstance(v.get("query"), dict):
            found.append(re.sub(r"label_values\((.*),\s*\w+\)", r"\1", v["query"]["query"]))
    return found


def scrape(cluster) -> str:
    line = cluster.up.wait_for("hami-control serving ", 1)
    url = line.split("hami-control serving ", 1)[1].split()[0]
    ctx = ssl.create_default_context(cafile=str(cluster.workdir / "control-certs" / "ca.crt"))
    with urllib.request.urlopen(f"{url}/metrics", context=ctx, timeout=10) as resp:
        texts = [resp.read().decode()]
    agents = json.loads((cluster.workdir / "node-metrics.json").read_text())
    assert sorted(agents) == ["node-a", "node-b"], agents
    for agent in agents.values():
        with urllib.request.urlopen(agent, timeout=10) as resp:
            texts.append(resp.read().decode())
    return "\n".join(texts)
