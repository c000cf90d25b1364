/* Simulated NVML: initialisation, versions, error strings and device identity/memory. */
#include <stdio.h>
#include <string.h>

#include "mig.h"
#include "nvml_internal.h"

const int sim_honours_cuda_visible = 0; /* NVML ignores CUDA_VISIBLE_DEVICES */

static int init_count; /* nvmlInit may be called repeatedly; each needs a shutdown */
static struct nvmlDevice_st handles[SIM_MAX_DEVICES];

nvmlReturn_t sim_nvml_device(nvmlDevice_t h, struct sim_device **out)
{
    if (!__atomic_load_n(&init_count, __ATOMIC_ACQUIRE))
        return NVML_ERROR_UNINITIALIZED;
    if (h && (h < handles || h >= handles + SIM_MAX_DEVICES))
        return sim_nvml_mig_device(h, out);
    if (!h || !(*out = sim_device(h->index)))
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t sim_nvml_gpu(nvmlDevice_t h, struct sim_device **out)
{
    nvmlReturn_t rc = sim_nvml_device(h, out);
    if (rc == NVML_SUCCESS)
        *out = sim_device(h->index);
    return rc;
}

nvmlDevice_t sim_nvml_handle(int index) { return &handles[index]; }

nvmlReturn_t sim_nvml_device_arg(nvmlDevice_t h, struct sim_device **out, const void *out_arg)
{
    nvmlReturn_t rc = sim_nvml_device(h, out);
    return (rc == NVML_SUCCESS && !out_arg) ? NVML_ERROR_INVALID_ARGUMENT : rc;
}

static nvmlReturn_t init(void)
{
    switch (sim_open()) {
    case SIM_READY:
        for (int i = 0; i < SIM_MAX_DEVICES; i++)
            handles[i] = (struct nvmlDevice_st){.index = i, .gi = -1, .ci = -1};
        __atomic_add_fetch(&init_count, 1, __ATOMIC_ACQ_REL);
        return NVML_SUCCESS;
    case SIM_BAD_CONFIG:
        return NVML_ERROR_GPU_NOT_FOUND;
    default:
        return NVML_ERROR_OPERATING_SYSTEM;
    }
}

SIM_API nvmlReturn_t nvmlInit_v2(void) { return init(); }
SIM_API nvmlReturn_t nvmlInit(void) { return init(); } /* the old name: same behaviour */
SIM_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return init();
}

SIM_API nvmlReturn_t nvmlShutdown(void)
{
    int n = __atomic_load_n(&init_count, __ATOMIC_ACQUIRE);
    if (n == 0)
        return NVML_ERROR_UNINITIALIZED;
    __atomic_sub_fetch(&init_count, 1, __ATOMIC_ACQ_REL);
    return NVML_SUCCESS;
}

#define RETURN_TEXT(name, value, text) case name: return text;
SIM_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
        HAMI_NVML_RETURNS(RETURN_TEXT)
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_string(char *dst, unsigned int len, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    return copy_string(version, length, SIM_NVML_DRIVER_VERSION);
}

SIM_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return copy_string(version, length, SIM_NVML_LIB_VERSION);
}

static nvmlReturn_t cuda_version(int *v)
{
    if (!v)
        return NVML_ERROR_INVALID_ARGUMENT;
    *v = sim_driver_version();
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return cuda_version(v); }
SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return cuda_version(v); }

static nvmlReturn_t device_count(unsigned int *deviceCount)
{
    if (!__atomic_load_n(&init_count, __ATOMIC_ACQUIRE))
        return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned int)sim_device_count();
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { return device_count(n); }
/* The unversioned name counted every device, also ones the process may not use; the simulator
 * has no such devices, so both answer alike. */
SIM_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return device_count(n); }

static nvmlReturn_t handle_by_index(unsigned int index, nvmlDevice_t *device)
{
    if (!__atomic_load_n(&init_count, __ATOMIC_ACQUIRE))
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned int)sim_device_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &handles[index];
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    return handle_by_index(i, d);
}
SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d)
{
    return handle_by_index(i, d);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!__atomic_load_n(&init_count, __ATOMIC_ACQUIRE))
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strncmp(uuid, "MIG-", 4) == 0)
        return sim_nvml_mig_by_uuid(uuid, device);
    for (int i = 0; i < sim_device_count(); i++) {
        if (strcmp(sim_device(i)->uuid, uuid) == 0) {
            *device = &handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

SIM_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int length)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device(h, &d);
    return rc == NVML_SUCCESS ? copy_string(name, length, d->name) : rc;
}

SIM_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int length)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device(h, &d);
    const char *mig = rc == NVML_SUCCESS ? sim_nvml_mig_uuid(h) : NULL;
    return rc == NVML_SUCCESS ? copy_string(uuid, length, mig ? mig : d->uuid) : rc;
}

/* Index (in this process's view), minor number (the physical device's) and NUMA node. */
static nvmlReturn_t device_uint(nvmlDevice_t h, unsigned int *out, int which)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, out);
    if (rc == NVML_SUCCESS)
        rc = sim_nvml_gpu(h, &d); /* a MIG device answers with its GPU's */
    if (rc == NVML_SUCCESS)
        *out = which == 2 ? (unsigned int)d->numa_node : which == 1 ? d->index : (unsigned int)h->index;
    return rc;
}

SIM_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *i) { return device_uint(h, i, 0); }
SIM_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned int *m)
{
    return device_uint(h, m, 1);
}
SIM_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t h, unsigned int *n)
{
    return device_uint(h, n, 2);
}

/* Total and used bytes of a device; used counts only live processes. */
static nvmlReturn_t memory_of(nvmlDevice_t h, const void *out, uint64_t *total, uint64_t *used)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, out);
    if (rc == NVML_SUCCESS) {
        /* a GPU in MIG mode: what its instances use; a MIG device: its own instance's */
        struct sim_mig_part parts[SIM_MIG_GIS];
        *total = d->total_bytes;
        *used = 0;
        sim_lock();
        int n = sim_mig_parts_locked(d, parts);
        for (int i = 0; i < n; i++) {
            sim_reap_locked(parts[i].record, 0);
            *used += sim_used_locked(parts[i].record);
        }
        sim_unlock();
        if (*used > *total)
            *used = *total;
    }
    return rc;
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *memory)
{
    uint64_t total, used;
    nvmlReturn_t rc = memory_of(h, memory, &total, &used);
    if (rc == NVML_SUCCESS)
        *memory = (nvmlMemory_t){.total = total, .free = total - used, .used = used};
    return rc;
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *memory)
{
    uint64_t total, used;
    nvmlReturn_t rc = memory_of(h, memory, &total, &used);
    if (rc == NVML_SUCCESS && memory->version != nvmlMemory_v2)
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (rc == NVML_SUCCESS) /* the simulator reserves nothing for the driver */
        *memory = (nvmlMemory_v2_t){.version = memory->version, .total = total, .reserved = 0,
                                    .free = total - used, .used = used};
    return rc;
}

SIM_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, pci);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(pci, 0, sizeof *pci);
    pci->bus = d->pci_bus;
    pci->pciDeviceId = sim_model_of(d->name)->pci_device_id << 16 | 0x10de; /* NVIDIA's vendor id */
    pci->pciSubSystemId = 0x134f10de;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", d->pci_bus);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", d->pci_bus);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int *major, int *minor)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device(h, &d);
    if (rc == NVML_SUCCESS && (!major || !minor))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        *major = d->cc_major;
        *minor = d->cc_minor;
    }
    return rc;
}
