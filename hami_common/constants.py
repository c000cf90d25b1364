"""Names HAMi's components agree on: resource names, annotation keys, labels, values.

One source of truth: the webhook, the scheduler extender, the node agent and the doubles import
these instead of spelling the strings themselves.
"""

# Container resources (limits, or requests when no limit is given).
RESOURCE_GPU = "nvidia.com/gpu"
RESOURCE_MEM = "nvidia.com/gpumem"
RESOURCE_MEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
RESOURCE_CORES = "nvidia.com/gpucores"
RESOURCE_PRIORITY = "nvidia.com/priority"
GPU_RESOURCES = (RESOURCE_GPU, RESOURCE_MEM, RESOURCE_MEM_PERCENTAGE, RESOURCE_CORES,
                 RESOURCE_PRIORITY)

# Node annotations written by the node agent / the scheduler.
ANNO_NODE_REGISTER = "hami.io/node-nvidia-register"
ANNO_NODE_HANDSHAKE = "hami.io/node-handshake"
ANNO_NODE_LOCK = "hami.io/mutex.lock"
ANNO_DEVICE_CORDON = "hami.io/device-cordon"
ANNO_NODE_GPU_SUMMARY = "hami.io/node-gpu-allocated"    # ours: what is allocated, for kubectl

# Pod annotations written by the scheduler.
ANNO_VGPU_NODE = "hami.io/vgpu-node"
ANNO_VGPU_TIME = "hami.io/vgpu-time"
ANNO_DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
ANNO_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
ANNO_BIND_PHASE = "hami.io/bind-phase"
ANNO_BIND_TIME = "hami.io/bind-time"
# What only hami-control and hami-node write on a pod (and the node lock, a node's): a pod
# created with any of them is refused by the webhook, since the view would count a forged
# decision as GPUs held and hami-node could take it for a pod waiting for its GPUs.
SCHEDULER_POD_ANNOTATIONS = (ANNO_VGPU_NODE, ANNO_VGPU_TIME, ANNO_DEVICES_TO_ALLOCATE,
                             ANNO_DEVICES_ALLOCATED, ANNO_BIND_PHASE, ANNO_BIND_TIME,
                             ANNO_NODE_LOCK)
BIND_PHASE_ALLOCATING = "allocating"
BIND_PHASE_SUCCESS = "success"
BIND_PHASE_FAILED = "failed"

# Pod phases after which a pod holds nothing (its containers have ended for good).
POD_FINISHED_PHASES = ("Succeeded", "Failed")

# Pod annotations written by users.
ANNO_USE_GPUTYPE = "nvidia.com/use-gputype"
ANNO_NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
ANNO_USE_GPUUUID = "nvidia.com/use-gpuuuid"
ANNO_NOUSE_GPUUUID = "nvidia.com/nouse-gpuuuid"
ANNO_NUMA_BIND = "nvidia.com/numa-bind"
ANNO_GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
ANNO_NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"

# Label on a pod or namespace that makes the webhook leave the pod alone.
LABEL_WEBHOOK = "hami.io/webhook"
LABEL_WEBHOOK_IGNORE = "ignore"
# On the hami-control pod that holds the Lease; the extender's Service selects on it.
LABEL_CONTROL_LEADER = "hami.io/control-leader"
# The chosen node as a pod label too, as HAMi sets it (its monitor lists pods by it).
LABEL_VGPU_NODE = "hami.io/vgpu-node"

SCHEDULER_NAME = "hami-scheduler"
DEVICE_VENDOR = "NVIDIA"
DEVICE_MODE_HAMI_CORE = "hami-core"
DEVICE_MODE_MIG = "mig"
# MIG (HAMi's flexible MIG): the pod's choice of mode, and the scheduler's reservation per MIG
# device that the node agent completes with the instance it made.
ANNO_VGPU_MODE = "nvidia.com/vgpu-mode"
ANNO_MIG_ALLOCATIONS = "hami.io/vgpu-mig-allocations"
SCHEDULER_POD_ANNOTATIONS += (ANNO_MIG_ALLOCATIONS,)

# Dynamic Resource Allocation (resource.k8s.io/v1): our driver, under a domain the project owns
# (its GitHub organisation's pages), its DeviceClass, CDI kind and the capacities it publishes.
DRA_DRIVER = "gpu.hami-py.github.io"
DRA_DEVICE_CLASS = DRA_DRIVER
DRA_CDI_KIND = "hami-py.github.io/gpu"
DRA_MEMORY = "memory"          # bytes, consumable in steps of 1 MiB
DRA_CORES = "cores"            # percent of the GPU's time, 0..100
# Opt-in of a pod or namespace (label or pod annotation) to have the webhook turn
# nvidia.com/gpu + gpumem + gpucores into a ResourceClaim.
LABEL_DRA = "hami.io/dra"
# On the claims made from the webhook's templates (a template's labels go to its claims): the
# webhook gives such a claim, at its creation, the finalizer kube-scheduler would otherwise add
# with a write of its own before allocating it.
LABEL_DRA_CLAIM = "hami.io/dra-claim"
CLAIM_DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
