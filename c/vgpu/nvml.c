/* NVML memory information in the container's view, so nvidia-smi inside the container shows
 * its limit and its use: total = the limit, used = what the container's live processes hold,
 * free = the rest (never negative). Devices without a limit keep the physical view. */
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
