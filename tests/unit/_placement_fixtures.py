"""Small builders for placement tests: devices, nodes, pods."""
from hami_common.mig import MigPlacement as P
from hami_common.mig import MigProfile
from hami_common.node_register import DeviceInfo
from hami_common.request import parse_pod
from hami_control.placement import ClusterView


def gpu(uuid, mem=16000, count=10, numa=0, type_="NVIDIA-T4", health=True, index=0):
    return DeviceInfo(id=uuid, index=index, count=count, devmem=mem, devcore=100, type=type_,
                      numa=numa, health=health)


# The A100-40GB as the simulated NVML reports it (tests/sim/test_sim_mig.py checks that table).
A100_MIG = (MigProfile("1g.5gb", 4864, 14, 1, tuple(P(i, 1) for i in range(7))),
            MigProfile("2g.10gb", 9856, 29, 2, (P(0, 2), P(2, 2), P(4, 2))),
            MigProfile("3g.20gb", 20096, 43, 3, (P(0, 4), P(4, 4))),
            MigProfile("4g.20gb", 20096, 57, 4, (P(0, 4),)),
            MigProfile("7g.40gb", 40448, 100, 7, (P(0, 8),)),
            MigProfile("1g.10gb", 9856, 14, 1, (P(0, 2), P(2, 2), P(4, 2), P(6, 2))))


def mig_gpu(uuid, index=0, health=True):
    """An A100-40GB registered in MIG mode, as hami-node (and HAMi's device plugin) does."""
    return DeviceInfo(id=uuid, index=index, count=7, devmem=40960, devcore=100,
                      type="NVIDIA-NVIDIA A100-SXM4-40GB", numa=0, health=health, mode="mig",
                      mig_profiles=A100_MIG)


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
