"""The dashboard's JSON snapshot, built from what hami-control already holds: the placement
view (nodes, GPUs, reservations), the Record (pods, refusals, events) and the last scrape of
the node agents (measured use, health, XIDs). One pass under the state lock copies the view;
the rest runs outside it, so placement never waits on the dashboard for more than the copy.

The format is made for the page (static/app.js): GPUs carry the pods on them as
[pod, MiB, cores] triples, so the page draws the split bars without joining anything; a MIG
GPU also carries its instances ([pod, profile, first memory slice, slices, MIG UUID or ""
until the node agent made it])."""
import time
from collections import Counter

from hami_control.placement.view import ClusterView

EVENTS_SHOWN = 200


def _copy_view(state) -> tuple:
    """(nodes as plain tuples, reservations) under the state lock."""
    with state.lock:
        view: ClusterView = state.view
        nodes = [(n.name, [(d.uuid, d.index, d.type, d.count, d.devmem, d.devcore, d.used,
                            d.usedmem, d.usedcores, d.health, d.cordoned, d.mode)
                           for d in n.devices])
                 for n in view.nodes]
        reservations = view.reservations()
    return nodes, reservations


def fingerprint(state, record, scraper) -> tuple:
    """What changes whenever the snapshot would: nodes coming or going, any node's usage (its
    version), the Record, a scrape round. Cheap (one sum over the node versions)."""
    with state.lock:
        view = state.view
        nodes = (view.epoch, len(view.nodes), int(view.versions.sum()) if view.nodes else 0,
                 state.preemption.version, state.claims.version)
    return nodes + (record.version, scraper.rounds)


def _instances(reservations) -> dict:
    """uuid -> [[pod, profile, start, size, MIG UUID], ...] of the MIG instances reserved."""
    out = {}
    for r in reservations:
        for a in r.mig:
            out.setdefault(a.gpu_uuid, []).append([r.pod, a.profile, a.placement.start,
                                                   a.placement.size, a.mig_uuid])
    return {uuid: sorted(rows, key=lambda row: row[2]) for uuid, rows in out.items()}


def _holders(reservations) -> dict:
    """uuid -> [[pod, MiB, cores], ...] and pod -> its GPUs, from the reservations."""
    on_gpu, of_pod = {}, {}
    for r in reservations:
        gpus = []
        for uuid, (_slots, mem, cores) in r.device_usage().items():
            on_gpu.setdefault(uuid, []).append([r.pod, mem, cores])
            gpus.append([uuid, mem, cores])
        of_pod[r.pod] = (r.node, gpus)
    return on_gpu, of_pod


def _gpu(dev: tuple, holders: list, scraped: dict, instances: list = ()) -> dict:
    uuid, index, gtype, count, devmem, devcore, used, usedmem, usedcores, health, cordoned, \
        mode = dev
    measured = scraped.get(uuid) or {}
    healthy = health and measured.get("healthy", True)
    out = {"uuid": uuid, "index": index, "type": gtype, "slots": count, "mem": devmem,
           "cores": devcore, "used": used, "usedmem": usedmem, "usedcores": usedcores,
           "healthy": bool(healthy), "pods": holders}
    if cordoned:
        out["cordoned"] = True
    if mode != "hami-core":
        out["mode"] = mode
        out["instances"] = list(instances)
    if measured.get("xids"):
        out["xids"] = sorted(set(measured["xids"]))
    if "mem" in measured:
        out["measured"] = {"mem": measured["mem"], "util": measured.get("util", 0)}
    return out


def _fits_any(free_mem: int, free_cores: int, devmem: int, shapes) -> bool:
    return any(ctr.memory_on(devmem) <= free_mem and ctr.cores <= free_cores
               for ctr in shapes)


def _overview(nodes: list, pending_shapes: list, pods: int, pending: int) -> dict:
    gpus = [g for n in nodes for g in n["gpus"]]
    o = Counter()
    for g in gpus:
        o["gpus"] += 1
        o["mem"] += g["mem"]
        o["cores"] += g["cores"]
        o["usedmem"] += g["usedmem"]
        o["usedcores"] += g["usedcores"]
        o["unhealthy"] += not g["healthy"]
        if g["used"] == 0:
            o["free"] += 1
            continue
        free_mem, free_cores = g["mem"] - g["usedmem"], g["cores"] - g["usedcores"]
        if free_mem > 0 and free_cores > 0 and g["used"] < g["slots"]:
            o["partial"] += 1
            if not _fits_any(free_mem, free_cores, g["mem"], pending_shapes):
                o["fragmented"] += 1
                o["fragmentedmem"] += free_mem
        else:
            o["full"] += 1
    return dict(o, nodes=len(nodes), pods=pods, pending=pending)


def _pod_use(scrapes: dict) -> dict:
    """ns/pod -> [[container, uuid, bytes in use, share %], ...] from all nodes' scrapes."""
    out = {}
    for result in scrapes.values():
        for (ns, pod, ctr, uuid), fig in (result.get("containers") or {}).items():
            out.setdefault(f"{ns}/{pod}", []).append([ctr, uuid, fig.get("mem"),
                                                      fig.get("share")])
    return out


def _claims(state) -> list:
    """The allocated DRA claims of our driver, as the page lists them: where, how much of
    which GPU (device name, MiB, cores), and the pods they are reserved for."""
    return [{"key": c.key, "node": ", ".join(sorted({d.node for d in c.devices})),
             "devices": [[d.device, d.mem, d.cores] for d in c.devices],
             "pods": [name for name, _ in c.pods]}
            for c in sorted(state.claims.claims(), key=lambda c: c.key)]


def build(state, record, scrapes: dict, now=None) -> dict:
    """The snapshot as a dict (JSON-ready)."""
    nodes_raw, reservations = _copy_view(state)
    pods, refusals, _agents, events = record.copy()
    on_gpu, of_pod = _holders(reservations)
    instances = _instances(reservations)
    scraped_gpus = {}
    errors = {}
    for node, result in scrapes.items():
        scraped_gpus.update(result.get("gpus") or {})
        if "error" in result:
            errors[node] = result["error"]
    nodes = []
    for name, devices in nodes_raw:
        node = {"name": name, "gpus": [_gpu(d, on_gpu.get(d[0], []), scraped_gpus,
                                            instances.get(d[0], [])) for d in devices]}
        if name in errors:
            node["scrape_error"] = errors[name]
        nodes.append(node)
    use = _pod_use(scrapes)
    pod_rows, pending, shapes = [], [], {}
    for key in sorted(set(pods) | set(of_pod)):
        facts = pods.get(key)
        node, gpus = of_pod.get(key, ("", []))
        if facts is not None and not facts.limits and not gpus:
            continue                    # a pod without GPUs: not the dashboard's business
        row = {"key": key, "node": node or (facts.node if facts else ""), "gpus": gpus,
               "phase": facts.phase if facts else "", "limits": facts.limits if facts else {},
               "use": use.get(key, [])}
        pod_rows.append(row)
        if facts is not None and not row["node"] and facts.phase == "Pending":
            _when, reason = refusals.get(key, (None, "waiting for the scheduler"))
            pending.append({"key": key, "reason": reason, "since": facts.created})
            if facts.request is not None:
                for ctr in facts.request.containers:
                    if ctr.nums:
                        shapes[(ctr.mem_mib, ctr.mem_percent, ctr.cores)] = ctr
    claims = _claims(state)
    overview = _overview(nodes, list(shapes.values()), len(pod_rows), len(pending))
    overview.update(claims=len(claims),
                    claimmem=sum(d[1] for c in claims for d in c["devices"]),
                    claimgpus=len({(c["node"], d[0]) for c in claims for d in c["devices"]}))
    return {"at": now if now is not None else time.time(), "overview": overview,
            "nodes": nodes, "pods": pod_rows, "pending": pending, "claims": claims,
            "preemption": state.preemption_snapshot(), "events": events[-EVENTS_SHOWN:]}
