"""NVML identity and events, device configuration, and what a bad configuration does."""
import json
import re
import subprocess
import sys

import pytest

from hami_sim.gpu import sim_env

UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

DESCRIBE = '''
    import pynvml
    pynvml.nvmlInit()
    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        by_uuid = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        pci = pynvml.nvmlDeviceGetPciInfo(h)
        out.append(dict(name=pynvml.nvmlDeviceGetName(h), uuid=uuid,
                        index=pynvml.nvmlDeviceGetIndex(by_uuid),
                        minor=pynvml.nvmlDeviceGetMinorNumber(h),
                        cc=list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
                        numa=pynvml.nvmlDeviceGetNumaNodeId(h), bus=pci.busId,
                        total=pynvml.nvmlDeviceGetMemoryInfo(h).total))
    say(devices=out, driver=pynvml.nvmlSystemGetDriverVersion(),
        cuda=pynvml.nvmlSystemGetCudaDriverVersion())
    pynvml.nvmlShutdown()
'''


def test_nvml_lists_the_configured_devices(sim):
    out, _ = sim.run(DESCRIBE)
    devices = out[0]["devices"]
    assert [(d["name"], d["total"], d["cc"]) for d in devices] == [
        ("NVIDIA A100-SXM4-40GB", 4 << 30, [8, 0]), ("Tesla T4", 2 << 30, [7, 5])]
    assert [d["index"] for d in devices] == [0, 1] == [d["minor"] for d in devices]
    assert all(UUID.match(d["uuid"]) for d in devices)
    assert devices[0]["uuid"] != devices[1]["uuid"]
    assert out[0]["cuda"] == 13000 and re.match(r"^\d+\.\d+", out[0]["driver"])
    assert all(re.match(r"^00000000:[0-9A-F]{2}:00\.0$", d["bus"]) for d in devices)


def test_cuda_and_nvml_agree_on_identity(sim):
    out, _ = sim.run('''
        import pynvml, uuid
        ok(cu.cuInit(0)); pynvml.nvmlInit()
        dev = ok(cu.cuDeviceGet(1))
        raw = bytes(ok(cu.cuDeviceGetUuid(dev)).bytes)
        A = cu.CUdevice_attribute
        say(cuda_uuid="GPU-" + str(uuid.UUID(bytes=raw)),
            nvml_uuid=pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(1)),
            sms=ok(cu.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)),
            major=ok(cu.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)),
            total=ok(cu.cuDeviceTotalMem(dev)), name=ok(cu.cuDeviceGetName(32, dev)).split(b"\\0")[0].decode())
    ''')
    got = out[0]
    assert got["cuda_uuid"] == got["nvml_uuid"]
    assert (got["sms"], got["major"], got["total"], got["name"]) == (4, 7, 2 << 30, "Tesla T4")


def test_uuids_are_deterministic_and_the_seed_separates_nodes(make_sim):
    first = make_sim("1g,1g", "a").run(DESCRIBE)[0][0]["devices"]
    again = make_sim("1g,1g", "b").run(DESCRIBE)[0][0]["devices"]
    other = make_sim("1g,1g", "c")
    seeded = other.run(DESCRIBE, env={**other.env, "HAMI_SIM_UUID_SEED": "node-2"})[0][0]
    assert [d["uuid"] for d in first] == [d["uuid"] for d in again]
    assert not {d["uuid"] for d in first} & {d["uuid"] for d in seeded["devices"]}


def test_injected_xid_reaches_every_waiting_event_set(sim):
    waiter = '''
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(1)
        events = pynvml.nvmlEventSetCreate()
        supported = pynvml.nvmlDeviceGetSupportedEventTypes(h)
        pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, events)
        try:
            pynvml.nvmlEventSetWait(events, 50)
            timeout = False
        except pynvml.NVMLError_Timeout:
            timeout = True
        say(ready=True, supported=supported, timed_out_first=timeout)
        data = pynvml.nvmlEventSetWait(events, 10000)
        say(xid=data.eventData, type=data.eventType,
            device=pynvml.nvmlDeviceGetIndex(data.device))
        pynvml.nvmlEventSetFree(events)
    '''
    waiters = [sim.spawn(waiter) for _ in range(2)]
    for w in waiters:
        assert json.loads(w.stdout.readline()) == {"ready": True, "supported": 8,
                                                   "timed_out_first": True}
    inject = subprocess.run([sys.executable, "-m", "hami_sim.cli", "inject-xid", "1", "79"],
                            env=sim.env, capture_output=True, text=True, timeout=30)
    assert inject.returncode == 0, inject.stderr
    for w in waiters:
        out, _ = w.communicate(timeout=15)
        assert json.loads(out) == {"xid": 79, "type": 8, "device": 1}


@pytest.mark.parametrize("spec, complaint", [
    ("16x", "memory '16x'"),
    ("16g/many", "SM count 'many'"),
    ("16g,,8g", "device 1: empty entry"),
    ("", None),  # empty means the default devices, not an error
], ids=["bad-size", "bad-sms", "empty-entry", "empty-is-default"])
def test_malformed_gpu_spec_fails_init_with_one_clear_line(make_sim, spec, complaint):
    gpu = make_sim("1g")
    env = {**gpu.env, "HAMI_SIM_GPUS": spec}
    out, err = gpu.run('''
        import pynvml
        try:
            pynvml.nvmlInit(); nvml = "ok"
        except pynvml.NVMLError as e:
            nvml = str(e)
        say(cuda=error_name(cu.cuInit(0)), nvml=nvml)
    ''', env=env)
    lines = [line for line in err.splitlines() if line.strip()]
    if complaint is None:
        assert out == [{"cuda": "CUDA_SUCCESS", "nvml": "ok"}] and not lines
        return
    assert out[0]["cuda"] == "CUDA_ERROR_NO_DEVICE" and out[0]["nvml"] != "ok"
    assert len(lines) == 2 and all("HAMI_SIM_GPUS" in line and complaint in line for line in lines)


def test_sim_env_builds_a_child_environment(tmp_path):
    env = sim_env(gpus=["8g/40/Tesla T4", "16g"], state_dir=tmp_path, base={"PATH": "/bin",
                  "LD_LIBRARY_PATH": "/opt/lib"}, uuid_seed="n1")
    assert env["HAMI_SIM_GPUS"] == "8g/40/Tesla T4,16g"
    assert env["HAMI_SIM_STATE"] == str(tmp_path) and env["HAMI_SIM_UUID_SEED"] == "n1"
    assert env["LD_LIBRARY_PATH"].endswith(":/opt/lib") and env["PATH"] == "/bin"
    assert env["LD_LIBRARY_PATH"].split(":")[0].endswith("hami_sim/lib")
