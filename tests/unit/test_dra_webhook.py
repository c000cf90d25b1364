"""The DRA opt-in: HAMi's GPU asks written as claim devices, the webhook's patch, and the
templates hami-control makes from what the patch recorded."""
import base64
import json

import pytest

from hami_common.constants import DRA_DEVICE_CLASS, DRA_DRIVER
from hami_common.dra_request import claim_devices, published_sizes, selector_expression
from hami_common.errors import RequestError
from hami_common.request import ContainerRequest, DeviceFilters
from hami_control.cluster.api import Conflict
from hami_control.cluster.dra_templates import DraTemplates, published_gpus, templates_for
from hami_control.webhook.admission import Webhook
from hami_control.webhook.dra import ANNO_DRA_CLAIMS, opted_in, recorded_asks

ATTR = f'device.attributes["{DRA_DRIVER}"]'


def test_an_ask_in_mib_with_cores_and_two_gpus():
    devices = claim_devices(ContainerRequest("c", nums=2, mem_mib=3000, cores=30),
                            DeviceFilters())
    [req] = devices["requests"]
    assert req == {"name": "gpu", "exactly": {
        "deviceClassName": DRA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": 2,
        "capacity": {"requests": {"memory": "3000Mi", "cores": "30"}}}}
    assert devices["constraints"] == [{"requests": ["gpu"],
                                       "distinctAttribute": f"{DRA_DRIVER}/uuid"}]


def test_a_bare_gpu_takes_the_policy_defaults_and_one_gpu_needs_no_constraint():
    devices = claim_devices(ContainerRequest("c", nums=1, mem_percent=100), DeviceFilters())
    assert "capacity" not in devices["requests"][0]["exactly"]
    assert "constraints" not in devices


def test_a_percentage_becomes_one_subrequest_per_memory_size():
    devices = claim_devices(ContainerRequest("c", nums=1, mem_percent=25),
                            DeviceFilters(use_types=("t4",)), [15360, 40960, 15360])
    subs = devices["requests"][0]["firstAvailable"]
    assert [s["name"] for s in subs] == ["mem40960", "mem15360"]
    assert subs[1]["capacity"] == {"requests": {"memory": "3840Mi"}}
    assert [sel["cel"]["expression"] for sel in subs[1]["selectors"]] == [
        f'({ATTR}.type.lowerAscii().contains("t4"))',
        f'device.capacity["{DRA_DRIVER}"].memory.compareTo(quantity("15360Mi")) == 0']


@pytest.mark.parametrize("ask, sizes, words", [
    (ContainerRequest("c", nums=1, mem_percent=50), [], "no GPU of"),
    (ContainerRequest("c", nums=1, mem_percent=50), list(range(1, 10)), "exceeds the 8"),
    (ContainerRequest("c", nums=0), [], "asks for no GPU"),
], ids=["no-sizes", "too-many-sizes", "no-gpu"])
def test_asks_that_cannot_be_written_say_why(ask, sizes, words):
    with pytest.raises(RequestError, match=words):
        claim_devices(ask, DeviceFilters(), sizes)


def test_type_and_uuid_annotations_become_one_selector():
    text = selector_expression(DeviceFilters(use_types=("a100", "h100"), nouse_types=("mig",),
                                             use_uuids=frozenset({"GPU-1"}),
                                             nouse_uuids=frozenset({"GPU-2", 'G"3'})))
    assert text == (f'({ATTR}.type.lowerAscii().contains("a100") || '
                    f'{ATTR}.type.lowerAscii().contains("h100")) && '
                    f'!{ATTR}.type.lowerAscii().contains("mig") && '
                    f'{ATTR}.uuid in ["GPU-1"] && !({ATTR}.uuid in ["G\\"3", "GPU-2"])')
    assert selector_expression(DeviceFilters()) is None


@pytest.mark.parametrize("meta, ns, want", [
    ({}, {"hami.io/dra": "true"}, True),
    ({"labels": {"hami.io/dra": "false"}}, {"hami.io/dra": "true"}, False),
    ({"annotations": {"hami.io/dra": "true"}}, {}, True),
    ({}, {}, False),
], ids=["namespace", "pod-opts-out", "pod-annotation", "neither"])
def test_opting_in(meta, ns, want):
    assert opted_in(meta, ns) is want


def review(pod: dict, ns_labels=None) -> dict:
    hook = Webhook(namespace_labels=lambda _n: ns_labels or {})
    answer = hook({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "request": {"uid": "1", "kind": {"kind": "Pod"}, "operation": "CREATE",
                               "namespace": "ns", "object": pod}})["response"]
    return answer


def apply_patch(doc: dict, ops: list) -> dict:
    """A small RFC 6902 applier (add/remove) for the patch's paths."""
    doc = json.loads(json.dumps(doc))
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~")
                          for p in op["path"].split("/")[1:]]
        target = doc
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if op["op"] == "remove":
            del target[last]
        elif isinstance(target, list):
            target.append(op["value"]) if last == "-" else target.insert(int(last), op["value"])
        else:
            target[last] = op["value"]
    return doc


def gpu_pod() -> dict:
    return {"metadata": {"generateName": "p-", "namespace": "ns",
                         "annotations": {"nvidia.com/use-gputype": "T4"}},
            "spec": {"containers": [
                {"name": "a", "image": "i", "resources": {"limits": {
                    "nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "cpu": "1"}}},
                {"name": "b", "image": "i"},
                {"name": "c", "image": "i", "resources": {
                    "limits": {"nvidia.com/gpucores": "30"},
                    "claims": [{"name": "mine"}]}}],
                "resourceClaims": [{"name": "mine", "resourceClaimName": "x"}]}}


def test_an_opted_in_pod_is_rewritten_to_claims_and_goes_to_our_scheduler():
    answer = review(gpu_pod(), {"hami.io/dra": "true"})
    pod = apply_patch(gpu_pod(), json.loads(base64.b64decode(answer["patch"])))
    a, b, c = pod["spec"]["containers"]
    assert a["resources"] == {"limits": {"cpu": "1"}, "claims": [{"name": "hami-gpu-0"}]}
    assert "resources" not in b
    assert c["resources"]["claims"] == [{"name": "mine"}, {"name": "hami-gpu-1"}]
    assert c["resources"]["limits"] == {}
    refs = pod["spec"]["resourceClaims"]
    assert [r["name"] for r in refs] == ["mine", "hami-gpu-0", "hami-gpu-1"]
    assert pod["spec"]["schedulerName"] == "hami-scheduler"     # for the prioritize extender
    asks = recorded_asks(pod)
    assert sorted(asks) == sorted(r["resourceClaimTemplateName"] for r in refs[1:])
    by_ctr = {v.name: v for v in asks.values()}
    assert (by_ctr["a"].mem_mib, by_ctr["c"].cores, by_ctr["c"].nums) == (2000, 30, 1)


class FakeApi:
    def __init__(self, fail=None):
        self.templates, self.events, self.fail = {}, [], fail

    def create_claim_template(self, namespace, template):
        if self.fail:
            raise self.fail
        name = template["metadata"]["name"]
        if name in self.templates:
            raise Conflict(409, "AlreadyExists", name)
        self.templates[name] = template
        return template

    def list_slices(self, driver):
        return [{"spec": {"devices": [
            {"attributes": {"type": {"string": "NVIDIA-Tesla T4"}, "uuid": {"string": "GPU-t"}},
             "capacity": {"memory": {"value": "15Gi"}}},
            {"attributes": {"type": {"string": "NVIDIA A100"}, "uuid": {"string": "GPU-a"}},
             "capacity": {"memory": {"value": "40Gi"}}}]}}]

    def create_event(self, namespace, event):
        self.events.append(event)


def created_pod() -> dict:
    answer = review(gpu_pod(), {"hami.io/dra": "true"})
    pod = apply_patch(gpu_pod(), json.loads(base64.b64decode(answer["patch"])))
    pod["metadata"].update(name="p-1", uid="uid-1")
    return pod


def test_templates_are_made_owned_by_the_pod_once_and_conflicts_are_fine():
    api, pod = FakeApi(), created_pod()
    maker = DraTemplates(api)
    assert maker.make(pod) and maker.make(pod)
    assert len(api.templates) == 2
    for t in api.templates.values():
        assert t["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        assert t["metadata"]["namespace"] == "ns"
        # Kubernetes copies these labels to the claims: the claim webhook knows them by it.
        assert t["spec"]["metadata"]["labels"] == {"hami.io/dra-claim": "true"}
    selectors = [t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
                 for t in api.templates.values()]
    assert all('contains("t4")' in s[0]["cel"]["expression"] for s in selectors)
    maker.on_pod(pod, deleted=False)          # made already: not queued again
    assert maker._queue.empty()


def test_a_template_that_cannot_be_written_is_told_on_the_pod():
    api, pod = FakeApi(), created_pod()
    anno = json.loads(pod["metadata"]["annotations"][ANNO_DRA_CLAIMS])
    first = sorted(anno)[0]
    anno[first].update(memMiB=0, memPercent=50)
    pod["metadata"]["annotations"][ANNO_DRA_CLAIMS] = json.dumps(anno)
    api.list_slices = lambda driver: []
    assert DraTemplates(api).make(pod)
    assert api.events[0]["reason"] == "GPUClaimTemplateFailed"
    assert "no GPU of" in api.events[0]["message"]


def test_the_sizes_a_percentage_may_take_follow_the_pods_filters():
    gpus = published_gpus(FakeApi().list_slices("d"))
    assert gpus == [("NVIDIA-Tesla T4", "GPU-t", 15360), ("NVIDIA A100", "GPU-a", 40960)]
    assert published_sizes(gpus, DeviceFilters()) == [15360, 40960]
    assert published_sizes(gpus, DeviceFilters(use_types=("t4",))) == [15360]
    assert published_sizes(gpus, DeviceFilters(nouse_uuids=frozenset({"GPU-t"}))) == [40960]
    # One size left: a plain request, no alternatives for kube-scheduler to try.
    devices = claim_devices(ContainerRequest("c", nums=1, mem_percent=10), DeviceFilters(),
                            [15360])
    assert devices["requests"][0]["exactly"]["capacity"] == {"requests": {"memory": "1536Mi"}}
    assert templates_for({"metadata": {}}, lambda filters: []) == []


def test_a_percentage_template_takes_the_sizes_from_the_given_cache_not_a_list():
    api, pod = FakeApi(), created_pod()
    anno = json.loads(pod["metadata"]["annotations"][ANNO_DRA_CLAIMS])
    for record in anno.values():
        record.update(memMiB=0, memPercent=50)
    pod["metadata"]["annotations"][ANNO_DRA_CLAIMS] = json.dumps(anno)
    cached = published_gpus(api.list_slices("d"))
    api.list_slices = lambda driver: pytest.fail("listed the slices for one pod")
    calls = []
    assert DraTemplates(api, sizes=lambda f: calls.append(1) or published_sizes(cached, f)
                        ).make(pod)
    assert calls and len(api.templates) == 2 and not api.events
    for t in api.templates.values():
        exactly = t["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        assert exactly["capacity"]["requests"]["memory"] == "7680Mi"     # 50 % of the T4
