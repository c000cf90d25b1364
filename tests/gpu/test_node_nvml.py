"""hami-node's NVML backend against the real driver: discovery, probes, XID event sets, usage.

The child imports only hami_node.plugin.nvml (standard library + pynvml), which is all a GPU
machine without the cluster packages has."""
import json
import os
import subprocess
import sys

from gpuhelpers import child
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD = r'''
import json, pynvml
from hami_node.plugin.nvml import NvmlBackend
backend = NvmlBackend()
gpus = backend.discover()
pynvml.nvmlInit()
watch = backend.watch_xids([g.uuid for g in gpus])
event = watch.wait(0.2)
watch.close()
print(json.dumps({
    "gpus": [[g.uuid, g.index, g.name, g.memory_mib, g.numa, g.minor] for g in gpus],
    "count": pynvml.nvmlDeviceGetCount(),
    "uuid0": pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0)),
    "probes": [backend.probe(g.uuid) for g in gpus],
    "unsupported": sorted(watch.unsupported), "event": event is not None,
    "usage": [[u.uuid, u.memory_used, u.memory_total, u.utilization] for u in backend.usage()],
    "util_type": type(backend.process_utilization(gpus[0].uuid)).__name__,
}))
'''


def test_nvml_backend_on_the_real_driver(gpu_env):
    env = dict(gpu_env, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in gpu_env.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run(child(env, "-c", CHILD), env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert len(out["gpus"]) == out["count"] >= 1
    assert out["gpus"][0][0] == out["uuid0"] and out["gpus"][0][0].startswith("GPU-")
    assert all(g[3] > 0 for g in out["gpus"]), "memory in MiB"
    assert out["probes"] == [None] * out["count"], "every GPU answers"
    assert out["event"] is False, "no XID on a healthy machine"
    assert [u[0] for u in out["usage"]] == [g[0] for g in out["gpus"]]
    assert all(0 <= u[1] <= u[2] and 0 <= u[3] <= 100 for u in out["usage"])
    assert out["util_type"] == "dict"
