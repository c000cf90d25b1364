"""Small builders for placement tests: devices, nodes, pods."""
from hami_common.node_register import DeviceInfo
from hami_common.request import parse_pod
from hami_control.placement import ClusterView


def gpu(uuid, mem=16000, count=10, numa=0, type_="NVIDIA-T4", health=True, index=0):
    return DeviceInfo(id=uuid, index=index, count=count, devmem=mem, devcore=100, type=type_,
                      numa=numa, health=health)


def view_of(spec, cpu=None, mem=None):
    """spec: {node: [DeviceInfo, ...]} -> ClusterView."""
    view = ClusterView()
    for name, devices in spec.items():
        view.upsert_node(name, devices, cpu, mem)
    return view


def pod_dict(name="p", gpus=1, mem=None, pct=None, cores=None, annotations=None, cpu=None,
             memory=None, containers=None, init=None):
    limits = {}
    if gpus is not None:
        limits["nvidia.com/gpu"] = gpus
    if mem is not None:
        limits["nvidia.com/gpumem"] = mem
    if pct is not None:
        limits["nvidia.com/gpumem-percentage"] = pct
    if cores is not None:
        limits["nvidia.com/gpucores"] = cores
    requests = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    main = {"name": "main", "resources": {"limits": limits, "requests": requests}}
    return {"metadata": {"name": name, "namespace": "t", "annotations": annotations or {}},
            "spec": {"containers": containers or [main], "initContainers": init or []}}


def request(**kwargs):
    return parse_pod(pod_dict(**kwargs))
