"""bench/k8s_throughput.py's counters: hami-control's own time per call, each component's CPU
seconds and the API server's requests (writes by verb and resource too)."""
import re


def _label(line: str, name: str) -> str:
    found = re.search(name + r'="([^"]*)"', line)
    return found.group(1) if found else ""


def server_times(control) -> dict:
    """hami-control's own mean time per webhook, filter and bind call (ms) and the number of
    calls, from its /metrics (the part of each call spent inside hami-control)."""
    _, body = control.client.request("GET", "/metrics")
    sums, counts = {}, {}
    for line in (body.decode() if isinstance(body, bytes) else body).splitlines():
        for verb in ("webhook", "filter", "bind", "prioritize"):
            name = f"hami_control_{verb}_seconds"
            if line.startswith(name + "_sum"):
                sums[verb] = float(line.split()[-1])
            elif line.startswith(name + "_count"):
                counts[verb] = int(float(line.split()[-1]))
    return {verb: {"calls": counts[verb], "mean_ms": round(1000 * sums[verb] / counts[verb], 2)}
            for verb in counts if counts[verb]}


def cpu_seconds(c) -> dict:
    """CPU seconds (user + system) each component has used so far, this script included."""
    import os
    tick = os.sysconf("SC_CLK_TCK")
    pids = {name: p.pid for name, p in c.procs.items()}
    pids["bench (creating, node agent)"] = os.getpid()
    used = {}
    for name, pid in pids.items():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            used[name] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue       # exited
    return used


WRITE_VERBS = ('verb="POST"', 'verb="PUT"', 'verb="PATCH"', 'verb="DELETE"', 'verb="APPLY"')


def apiserver_counters(c) -> dict:
    """Counters the API server has kept so far (its /metrics): mutating requests answered
    (`writes`, the shared resource both runs compete for on one machine), single-object GETs
    (`reads`) and the time it spent calling admission webhooks (`webhook_s`,
    `webhook_calls`); `w:<verb> <resource> [subresource]`: the writes by kind."""
    import ssl
    import urllib.request
    ctx = ssl.create_default_context(cafile=str(c.pki.ca))
    ctx.load_cert_chain(str(c.pki.crt("admin")), str(c.pki.key("admin")))
    with urllib.request.urlopen(c.api_url + "/metrics", context=ctx, timeout=30) as resp:
        text = resp.read().decode()
    out = {"writes": 0.0, "reads": 0.0, "webhook_s": 0.0, "webhook_calls": 0.0}
    for line in text.splitlines():
        value = line.rsplit(" ", 1)[-1]
        if line.startswith("apiserver_request_total{") and any(v in line for v in WRITE_VERBS):
            out["writes"] += float(value)
            key = "w:" + " ".join(_label(line, k) for k in ("verb", "resource", "subresource"))
            out[key.rstrip()] = out.get(key.rstrip(), 0.0) + float(value)
        elif line.startswith("apiserver_request_total{") and 'verb="GET"' in line:
            out["reads"] += float(value)
        elif line.startswith("apiserver_admission_webhook_admission_duration_seconds_sum{"):
            out["webhook_s"] += float(value)
        elif line.startswith("apiserver_admission_webhook_admission_duration_seconds_count{"):
            out["webhook_calls"] += float(value)
    return out
