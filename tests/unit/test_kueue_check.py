"""The Kueue admission check: a workload waits (Pending, with the filter's reason) until a GPU
fits each of its pods, two workloads never count on the same room, our AdmissionChecks are made
Active, and other controllers' checks are left alone."""
from hami_common.request import RequestDefaults
from hami_control.cluster.api import KueueApi
from hami_control.kueue.controller import KueueCheck
from hami_control.placement import Reservation
from hami_control.placement.annotations import NodeRegistration
from hami_control.state import make_state
from hami_common.pod_devices import ContainerDevice
from tests.unit._placement_fixtures import gpu


class FakeKueue:
    """Workloads and AdmissionChecks in memory; patches applied as the API server would."""

    def __init__(self, workloads, checks):
        self.objects = {"workloads": workloads, "admissionchecks": checks}
        self.patches = []

    def list_kueue(self, kind):
        return self.objects[kind]

    def patch_kueue_status(self, kind, namespace, name, status):
        obj = next(o for o in self.objects[kind] if o["metadata"]["name"] == name)
        obj.setdefault("status", {}).update(status)
        self.patches.append((kind, name, status))
        return obj

    def json_patch_kueue_status(self, kind, namespace, name, operations):
        obj = next(o for o in self.objects[kind] if o["metadata"]["name"] == name)
        for op in operations:
            *parents, leaf = op["path"].strip("/").split("/")
            target = obj
            for part in parents:
                target = target[int(part)] if isinstance(target, list) else target[part]
            if op["op"] == "test":
                assert target[leaf] == op["value"]
            else:
                target[leaf] = op["value"]
        self.patches.append((kind, name, operations))
        return obj


def _workload(name, mem, count=1, check="gpu-fit", reserved=True, created="1"):
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpumem": str(mem)}}}
    conds = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    return {"metadata": {"name": name, "namespace": "team", "creationTimestamp": created},
            "spec": {"podSets": [{"name": "main", "count": count,
                                  "template": {"spec": {"containers": [container]}}}]},
            "status": {"conditions": conds,
                       "admissionChecks": [{"name": "other", "state": "Pending", "message": ""},
                                           {"name": check, "state": "Pending",
                                            "message": ""}]}}


def _check(name, controller="hami.io/gpu-fit"):
    return {"metadata": {"name": name}, "spec": {"controllerName": controller}}


def _state():
    state = make_state()
    state.apply_node("n1", NodeRegistration("n1", (gpu("G0", mem=40000, index=0),
                                                   gpu("G1", mem=40000, index=1))))
    for uuid in ("G0", "G1"):             # 20000 used on each: 20000 free on each, 40000 in all
        state.view.reserve(Reservation(f"team/hold-{uuid}", "n1",
                                       ((ContainerDevice(uuid, 20000, 10),),)))
    return state


def _states(api, name):
    wl = next(o for o in api.objects["workloads"] if o["metadata"]["name"] == name)
    return {s["name"]: (s["state"], s["message"]) for s in wl["status"]["admissionChecks"]}


def test_a_workload_waits_with_the_reason_until_one_gpu_fits_and_is_then_ready():
    state = _state()
    api = FakeKueue([_workload("big", 30000)], [_check("gpu-fit"), _check("other", "x/y")])
    assert isinstance(api, KueueApi)
    check = KueueCheck(state, api, RequestDefaults(), lambda: True)
    check.run_once()
    state_, message = _states(api, "big")["gpu-fit"]
    assert state_ == "Pending" and "no GPU can hold pod 1 of 1 (pod set main) now" in message
    assert "CardInsufficientMemory" in message
    assert _states(api, "big")["other"] == ("Pending", "")        # not ours
    assert api.objects["admissionchecks"][0]["status"]["conditions"][0]["type"] == "Active"
    assert "status" not in api.objects["admissionchecks"][1]
    writes = len(api.patches)
    check.run_once()                                   # nothing new to say: nothing written
    assert len(api.patches) == writes
    state.view.release("team/hold-G1")
    check.run_once()
    assert _states(api, "big")["gpu-fit"][0] == "Ready"
    assert state.view.reservation("team/big-main-0.kueue-check") is None   # probes released


def test_two_workloads_never_count_on_the_same_room_and_quota_reservation_comes_first():
    state = _state()
    api = FakeKueue([_workload("first", 15000, created="1"),
                     _workload("second", 15000, created="2"),
                     _workload("unreserved", 1000, reserved=False, created="0")],
                    [_check("gpu-fit")])
    KueueCheck(state, api, RequestDefaults(), lambda: True).run_once()
    assert _states(api, "first")["gpu-fit"][0] == "Ready"
    assert _states(api, "second")["gpu-fit"][0] == "Ready"   # the other GPU
    api.objects["workloads"].append(_workload("third", 15000, created="3"))
    for name in ("first", "second"):                         # admitted: no longer waiting
        wl = next(o for o in api.objects["workloads"] if o["metadata"]["name"] == name)
        wl["status"]["conditions"].append({"type": "Admitted", "status": "True"})
    KueueCheck(state, api, RequestDefaults(), lambda: True).run_once()
    assert _states(api, "third")["gpu-fit"][0] == "Ready"    # their pods are not placed yet
    assert _states(api, "unreserved")["gpu-fit"] == ("Pending", "")
    api.objects["workloads"].append(_workload("pair", 15000, count=3, created="4"))
    KueueCheck(state, api, RequestDefaults(), lambda: True).run_once()
    assert "pod 3 of 3" in _states(api, "pair")["gpu-fit"][1]
