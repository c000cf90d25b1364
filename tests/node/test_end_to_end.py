"""End to end on one node: the scheduler's decision, kubelet's Allocate through hami-node, and
the container's command run (hami_sim/container.py) with the answer: a cuda-python program
under the real shim gets CUDA_ERROR_OUT_OF_MEMORY past its gpumem, and the agent's metrics see
the container's use."""
import json
import os
import signal
import sys
import textwrap

from hami_common import constants as C
from hami_sim.container import start_container

from nodehelpers import SPLIT, Scheduler, samples, wait_for

MIB = 1 << 20
PROGRAM = textwrap.dedent('''
    import ctypes, json, sys
    from cuda.bindings import driver as cu

    def ok(ret):
        err, *rest = ret
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(err.name)
        return rest[0] if len(rest) == 1 else rest

    ok(cu.cuInit(0))
    count = ok(cu.cuDeviceGetCount())
    dev = ok(cu.cuDeviceGet(0))
    ctx = ok(cu.cuCtxCreate(None, 0, dev))
    total = ok(cu.cuDeviceTotalMem(dev))
    held, error = [], None
    while error is None:
        err, ptr = cu.cuMemAlloc(256 << 20)
        if err == cu.CUresult.CUDA_SUCCESS:
            held.append(ptr)
        else:
            error = err.name
    mod = ok(cu.cuModuleLoadData(b"spin"))
    spin = ok(cu.cuModuleGetFunction(mod, b"spin"))
    ns = ctypes.c_uint64(400_000_000)
    args = (ctypes.c_void_p * 1)(ctypes.addressof(ns))
    ok(cu.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, 0, ctypes.addressof(args), 0))
    print(json.dumps({"devices": count, "total": total, "held": len(held) * 256,
                      "error": error}), flush=True)
    sys.stdin.readline()      # hold the memory until the test has looked
''')


def test_container_gets_out_of_memory_past_its_gpumem(node_cluster):
    node, kubelet, sched = node_cluster
    proc = node.start()
    kubelet.kubelet.wait_registered(C.RESOURCE_GPU, devices=2 * SPLIT, timeout=10)
    uuid = node.uuids()[1]
    ctr = Scheduler.container("trainer", extra_limits={C.RESOURCE_MEM: "1000"},
                              command=[sys.executable, "-c", PROGRAM])
    sched.schedule("oom", [[(uuid, 1000, 0)]], [ctr])
    [alloc] = kubelet.kubelet.wait_allocated("default", "oom")
    container = start_container(alloc, node.env, stdin=-1, stdout=-1, stderr=-1, text=True)
    try:
        line = container.stdout.readline()
        assert line, container.stderr.read()
        out = json.loads(line)
        assert out == {"devices": 1, "total": 1000 * MIB, "held": 768,
                       "error": "CUDA_ERROR_OUT_OF_MEMORY"}
        ctr_labels = {"podnamespace": "default", "podname": "oom", "ctrname": "trainer",
                      "vdeviceid": "0", "deviceuuid": uuid}

        def figures():
            text = proc.metrics()
            return {name: dict((tuple(sorted(l.items())), v) for l, v in samples(text, name))
                    .get(tuple(sorted(ctr_labels.items())))
                    for name in ("vGPU_device_memory_usage_in_bytes",
                                 "vGPU_device_memory_limit_in_bytes",
                                 "Device_utilization_desc_of_container")}
        got = wait_for(lambda: (f := figures())["Device_utilization_desc_of_container"] and f,
                       timeout=5, what="the container's utilization in the metrics")
        assert got["vGPU_device_memory_usage_in_bytes"] == 768 * MIB
        assert got["vGPU_device_memory_limit_in_bytes"] == 1000 * MIB
        assert 0 < got["Device_utilization_desc_of_container"] <= 100
    finally:
        if container.poll() is None:
            os.killpg(container.pid, signal.SIGKILL)
        container.wait(timeout=10)
        for stream in (container.stdin, container.stdout, container.stderr):
            stream.close()
