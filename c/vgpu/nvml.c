/* NVML in the container's view, so nvidia-smi inside the container shows its limit and its
 * use: total = the limit, used = what the container's live processes hold by the driver's
 * count (their contexts and modules included, see footprint.c), free = the rest (never
 * negative); the per-process list shows the container's own processes, under the PIDs the
 * container knows them by, with the memory the driver counts for each. Devices without a
 * limit keep the physical view. */
#include <string.h>

#include "vgpu.h"

/* Replaces physical values by the container's view when the device has a limit. */
static void container_view(nvmlDevice_t device, unsigned long long *total,
                           unsigned long long *used, unsigned long long *free)
{
    struct vgpu_usage u;
    if (vgpu_usage_of(vgpu_record_of_nvml(device), &u) < 0 || !u.limit)
        return;
    *total = u.limit < *total ? u.limit : *total;
    *used = u.used < *total ? u.used : *total;
    *free = *total - *used;
}

nvmlReturn_t hook_nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t rc = CALL_NVML(nvmlDeviceGetMemoryInfo, device, memory);
    if (rc == NVML_SUCCESS)
        container_view(device, &memory->total, &memory->used, &memory->free);
    return rc;
}

nvmlReturn_t hook_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    nvmlReturn_t rc = CALL_NVML(nvmlDeviceGetMemoryInfo_v2, device, memory);
    if (rc == NVML_SUCCESS) {
        unsigned long long total = memory->total;
        container_view(device, &memory->total, &memory->used, &memory->free);
        if (memory->total != total) /* the driver's reservation is not the container's */
            memory->reserved = 0;
    }
    return rc;
}

#define MAX_SHOWN 256

/* Keeps the container's processes of a list the driver filled (`n` entries of `size` bytes,
 * the pid first), renamed to their container PIDs; returns how many remain. */
static unsigned int keep_container(void *infos, unsigned int n, size_t size)
{
    int32_t pids[VGPU_MAX_PROCS], hosts[VGPU_MAX_PROCS];
    int known = vgpu_ledger_processes(pids, hosts, VGPU_MAX_PROCS);
    unsigned int kept = 0;
    for (unsigned int i = 0; i < n; i++) {
        char *entry = (char *)infos + i * size;
        unsigned int pid;
        memcpy(&pid, entry, sizeof pid);
        for (int k = 0; k < known; k++) {
            if ((unsigned int)hosts[k] != pid)
                continue;
            pid = (unsigned int)pids[k];
            memcpy(entry, &pid, sizeof pid);
            memmove((char *)infos + kept++ * size, entry, size);
            break;
        }
    }
    return kept;
}

/* One process-list call in the container's view: the driver's full list, filtered. */
#define CONTAINER_PROCESSES(sym, type, device, count, infos)                                   \
    do {                                                                                       \
        struct vgpu_usage u_;                                                                  \
        if (!count || vgpu_usage_of(vgpu_record_of_nvml(device), &u_) < 0 || !u_.limit)        \
            return CALL_NVML(sym, device, count, infos);                                       \
        type all_[MAX_SHOWN];                                                                  \
        unsigned int n_ = MAX_SHOWN;                                                           \
        nvmlReturn_t rc_ = CALL_NVML(sym, device, &n_, all_);                                  \
        if (rc_ != NVML_SUCCESS)                                                               \
            return rc_;                                                                        \
        n_ = keep_container(all_, n_, sizeof(type));                                           \
        if (*count < n_ || (n_ && !infos)) {                                                   \
            *count = n_;                                                                       \
            return NVML_ERROR_INSUFFICIENT_SIZE;                                               \
        }                                                                                      \
        memcpy(infos, all_, n_ * sizeof(type));                                                \
        *count = n_;                                                                           \
        return NVML_SUCCESS;                                                                   \
    } while (0)

nvmlReturn_t hook_nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                          unsigned int *count,
                                                          nvmlProcessInfo_t *infos)
{
    CONTAINER_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, device,
                        count, infos);
}

nvmlReturn_t hook_nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                          unsigned int *count,
                                                          nvmlProcessInfo_t *infos)
{
    CONTAINER_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_t, device,
                        count, infos);
}

nvmlReturn_t hook_nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *count,
                                                       nvmlProcessInfo_v1_t *infos)
{
    CONTAINER_PROCESSES(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, device,
                        count, infos);
}
