"""Round trips and errors of the HAMi wire codecs (register, pod devices, lock, handshake)."""
import json
from datetime import datetime, timedelta, timezone

import pytest

from hami_common import handshake, node_lock, node_register, node_register_legacy, pod_devices
from hami_common.errors import HamiFormatError
from hami_common.node_register import DeviceInfo, device_type_name
from hami_common.pod_devices import ContainerDevice

DEVICES = [DeviceInfo(id="GPU-0fc3", index=0, count=10, devmem=32768, devcore=100,
                      type="NVIDIA-Tesla V100-PCIE-32GB", numa=1),
           DeviceInfo(id="GPU-77aa", index=1, count=4, devmem=16384, devcore=100,
                      type="NVIDIA-T4", numa=0, health=False)]


def test_register_json_round_trip():
    assert node_register.decode(node_register.encode(DEVICES)) == DEVICES


def test_register_json_accepts_hami_example():
    value = ('[{"id":"GPU-0fc3","index":1,"count":10,"devmem":32768,"devcore":100,'
             '"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true}]')
    (dev,) = node_register.decode(value)
    assert (dev.id, dev.index, dev.count, dev.devmem, dev.numa, dev.health) == \
        ("GPU-0fc3", 1, 10, 32768, 1, True)


def test_register_legacy_round_trip_and_auto_detect():
    text = node_register_legacy.encode(DEVICES)
    assert node_register_legacy.decode(text) == DEVICES
    assert node_register.decode(text) == DEVICES


def test_register_legacy_seven_fields_take_position_as_index():
    devs = node_register.decode("GPU-a,10,16384,100,NVIDIA-T4,0,true:GPU-b,10,16384,100,"
                                "NVIDIA-T4,1,false:")
    assert [(d.id, d.index, d.numa, d.health) for d in devs] == \
        [("GPU-a", 0, 0, True), ("GPU-b", 1, 1, False)]


@pytest.mark.parametrize("value, message", [
    ("[{\"id\":\"GPU-a\",\"count\":\"ten\",\"devmem\":1}]", "count must be an integer"),
    ("[{\"id\":\"GPU-a\",\"count\":1,\"devmem\":1},{\"id\":\"GPU-a\",\"count\":1,\"devmem\":1}]",
     "twice"),
    ("[{\"id\":\"GPU-a\",\"count\":1,\"devmem\":-5}]", "negative"),
    ("[not json", "not valid JSON"),
    ("GPU-a,10,16384:", "expected 7 or 9"),
    ("GPU-a,10,big,100,T4,0,true:", "devmem 'big' is not an integer"),
    ("GPU-a,10,1,100,T4,0,maybe:", "not true/false"),
], ids=["count-type", "duplicate", "negative", "bad-json", "legacy-fields",
        "legacy-int", "legacy-bool"])
def test_register_errors_say_what_is_wrong(value, message):
    with pytest.raises(HamiFormatError, match=message):
        node_register.decode(value)


def test_register_empty_is_no_devices():
    assert node_register.decode("") == [] and node_register.decode("[]") == []


def test_type_name_prefix():
    assert device_type_name("Tesla T4") == "NVIDIA-Tesla T4"
    assert device_type_name("NVIDIA A100-SXM4-80GB") == "NVIDIA A100-SXM4-80GB"


def test_pod_devices_example_from_hami():
    value = "GPU-0fc3,NVIDIA,3000,30:;;GPU-0fc3,NVIDIA,5000,0:;"
    decoded = pod_devices.decode(value)
    assert decoded == ((ContainerDevice("GPU-0fc3", 3000, 30),), (),
                       (ContainerDevice("GPU-0fc3", 5000, 0),))
    assert pod_devices.encode(decoded) == value


@pytest.mark.parametrize("pod", [
    (), ((),), ((ContainerDevice("GPU-a", 1, 2), ContainerDevice("GPU-b", 3, 100)), ()),
    ((), (), (ContainerDevice("GPU-c", 0, 0),)),
], ids=["no-containers", "one-empty", "multi-gpu-then-empty", "empty-first"])
def test_pod_devices_round_trip(pod):
    assert pod_devices.decode(pod_devices.encode(pod)) == pod


@pytest.mark.parametrize("value", ["GPU-a,NVIDIA,1:;", "GPU-a,NVIDIA,x,1:;",
                                   "GPU-a,NVIDIA,-1,0:;"], ids=["fields", "int", "negative"])
def test_pod_devices_errors(value):
    with pytest.raises(HamiFormatError):
        pod_devices.decode(value)


def test_node_lock_round_trip_and_expiry():
    when = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
    lock = node_lock.NodeLock(when, "default", "trainer-0")
    text = node_lock.encode(lock)
    assert text == "2024-05-01T12:00:00Z,default,trainer-0"
    assert node_lock.decode(text) == lock
    assert not lock.expired(when + timedelta(minutes=4))
    assert lock.expired(when + timedelta(minutes=6))


def test_node_lock_old_format_and_errors():
    assert node_lock.decode("2024-05-01T12:00:00+02:00").pod == ""
    with pytest.raises(HamiFormatError, match="RFC3339"):
        node_lock.decode("yesterday,ns,pod")
    with pytest.raises(HamiFormatError, match="must be"):
        node_lock.decode("2024-05-01T12:00:00Z,ns")


def test_handshake_round_trip_and_staleness():
    when = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
    shake = handshake.Handshake(handshake.REQUESTING, when)
    assert handshake.encode(shake) == "Requesting_2024-05-01 12:00:00"
    assert handshake.decode(handshake.encode(shake)) == shake
    assert shake.stale(when + timedelta(seconds=61))
    assert not handshake.Handshake(handshake.REPORTED, when).stale(when + timedelta(hours=1))
    assert handshake.decode("Reported 2024-05-01 12:00:00.123456 +0000 UTC").state == "Reported"
    with pytest.raises(HamiFormatError):
        handshake.decode("Hello_2024-05-01 12:00:00")


# HAMi's node agent writes the register annotation with Go's encoding/json and `omitempty`:
# zero values are left out. These are the shapes it writes.
HAMI_WRITES = {
    "healthy": ('{"id":"GPU-a","index":1,"count":10,"devmem":40960,"devcore":100,'
                '"type":"NVIDIA-A100-SXM4-40GB","numa":1,"mode":"hami-core","health":true}',
                dict(index=1, count=10, devmem=40960, numa=1, health=True)),
    "unhealthy-omitted": ('{"id":"GPU-a","count":10,"devmem":40960,"devcore":100,'
                          '"type":"NVIDIA-A100-SXM4-40GB","mode":"hami-core"}',
                          dict(index=0, count=10, devmem=40960, numa=0, health=False)),
    "zero-count-and-memory-omitted": ('{"id":"GPU-a","devcore":100,"type":"NVIDIA-T4",'
                                      '"health":true}',
                                      dict(index=0, count=0, devmem=0, numa=0, health=True)),
}


@pytest.mark.parametrize("case", HAMI_WRITES, ids=list(HAMI_WRITES))
def test_register_reads_what_hamis_go_encoder_writes(case):
    text, expected = HAMI_WRITES[case]
    (dev,) = node_register.decode(f"[{text}]")
    assert {k: getattr(dev, k) for k in expected} == expected


def hami_reads(value: str) -> list:
    """The register annotation as HAMi's Go decoder reads it: a missing field is its zero
    value, unknown fields are ignored."""
    zero = {"id": "", "index": 0, "count": 0, "devmem": 0, "devcore": 0, "type": "", "numa": 0,
            "mode": "", "health": False}
    return [{k: item.get(k, z) for k, z in zero.items()} for item in json.loads(value)]


def test_hami_reads_our_register_annotation_as_we_mean_it():
    ours = node_register.encode(DEVICES)
    assert hami_reads(ours) == [
        {"id": d.id, "index": d.index, "count": d.count, "devmem": d.devmem,
         "devcore": d.devcore, "type": d.type, "numa": d.numa, "mode": d.mode,
         "health": d.health} for d in DEVICES]
