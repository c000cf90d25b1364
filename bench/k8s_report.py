"""bench/k8s_throughput.py's report: each run's figures, their ratios to kube-scheduler alone,
and packing against the in-process replay of the same pods."""
import json


def _packing(name: str, real: dict, replay: dict) -> None:
    per_pod = [p["gpus"] / p["pods"] if p["pods"] else 0.0 for p in (real, replay)]
    print(f"k8s_{name}packing_gpus_per_pod={per_pod[0]:.3f}")
    print(f"k8s_{name}packing_ratio={per_pod[0] / per_pod[1] if per_pod[1] else 0.0:.3f}")
    print(f"packing{' (' + name.rstrip('_') + ')' if name else ''}: {real['gpus']} GPUs for "
          f"{real['pods']} GPU pods through kube-scheduler vs {replay['gpus']} for "
          f"{replay['pods']} in the in-process replay of the same pods (GPUs per pod "
          f"{per_pod[0]:.3f} vs {per_pod[1]:.3f})")


def report(ours: dict, alone: dict, dra, replay: dict, total: int, scored=None,
           bare=None) -> None:
    """Prints the runs, their ratios to kube-scheduler alone, where the time went and packing
    vs the replay (`bare`: the DRA run whose claims lacked the finalizer at creation)."""
    runs = [("extender", ours), ("dra", dra), ("dra_without_finalizer", bare),
            ("dra_prioritize", scored), ("scheduler_alone", alone)]
    runs = [(k, r) for k, r in runs if r is not None]
    for _, r in runs:
        print(json.dumps(r))
    for key, r in runs:
        print(f"k8s_{key}_pods_per_s={r['pods_per_s']:.1f}")
        print(f"k8s_{key}_p50_ms={r['p50_ms']:.0f}" if r["p50_ms"] is not None else "")
        print(f"k8s_{key}_p99_ms={r['p99_ms']:.0f}" if r["p99_ms"] is not None else "")
    base = alone["pods_per_s"]
    for key, r in runs[:-1]:
        name = "k8s_throughput" if key == "extender" else f"k8s_{key}_throughput"
        print(f"{name}_ratio={r['pods_per_s'] / base if base else 0.0:.2f}")
        print(f"{key} / kube-scheduler alone: {r['pods_per_s'] / base if base else 0.0:.2f} "
              f"of the throughput ({r['pods_per_s']:.1f} vs {base:.1f} pods/s; {r['bound']} "
              f"and {alone['bound']} of {total} pods bound); API server writes per pod "
              f"{r['apiserver_writes_per_pod']} vs {alone['apiserver_writes_per_pod']}, "
              f"single-object reads {r['apiserver_reads_per_pod']} vs "
              f"{alone['apiserver_reads_per_pod']}; CPU seconds {r['cpu_s']}")
    print(f"CPU seconds during kube-scheduler alone: {alone['cpu_s']}")
    if ours is not None:
        _packing("", ours["packing"], replay)
    if dra is not None:
        _packing("dra_", dra["packing"], replay)
    if scored is not None:
        _packing("dra_prioritize_", scored["packing"], replay)
        served = (scored.get("hami_control") or {}).get("prioritize")
        if served:
            print(f"prioritize in hami-control: {served['calls']} calls, "
                  f"{served['mean_ms']} ms each (mean)")
        if dra is not None and dra["pods_per_s"]:
            print(f"dra with / without the prioritize extender: "
                  f"{scored['pods_per_s'] / dra['pods_per_s']:.2f} of the throughput")
