/* Which device record a CUDA ordinal or an NVML handle means. Records are keyed by UUID, so
 * processes with different CUDA_VISIBLE_DEVICES, and NVML (which ignores that variable), all
 * agree; the limit of a new record comes from CUDA_DEVICE_MEMORY_LIMIT(_<i>) for the ordinal
 * the application sees. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu.h"

static int record_plus_one[VGPU_MAX_DEVICES]; /* per CUDA ordinal; 0: not looked up yet */

uint64_t vgpu_driver_size(uint64_t bytes)
{
    uint64_t align = bytes <= (1ULL << 20) ? 512 : 2ULL << 20;
    return bytes > UINT64_MAX - align ? bytes : (bytes + align - 1) / align * align;
}

/* NVML's name for a CUDA device: "MIG-<uuid>" for a MIG device, whose _v2 UUID (its own)
 * differs from the original call's (its GPU's), else "GPU-<uuid>". NVML finds either by
 * nvmlDeviceGetHandleByUUID, which the footprint and the limiter use. */
static void format_uuid(const CUuuid *u, int mig, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len, "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             mig ? "MIG" : "GPU", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
             b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* Registers a device; warns once when the file already holds another limit for it. */
static int register_device(const char *uuid, uint64_t total, int ordinal)
{
    const struct vgpu_config *c = vgpu_config();
    const struct vgpu_uuid_limit *by_uuid = vgpu_config_uuid(c, uuid);
    uint64_t limit = 0, want = by_uuid ? by_uuid->mem : c->mem_limit[ordinal];
    uint32_t sm = by_uuid ? by_uuid->sm : c->sm_limit[ordinal];
    int rec = vgpu_ledger_register(uuid, total, want, sm, &limit);
    if (rec < 0)
        vgpu_log(VGPU_LOG_ERROR, "no free device record for %s in the shared file", uuid);
    else if (limit != want)
        vgpu_log(VGPU_LOG_WARN, "device %d (%s): the container's shared file limits it to %llu "
                 "bytes, not %llu as this process's environment says; the file wins", ordinal,
                 uuid, (unsigned long long)limit, (unsigned long long)want);
    return rec;
}

int vgpu_record_of_ordinal(CUdevice ordinal)
{
    if (ordinal < 0 || ordinal >= VGPU_MAX_DEVICES || vgpu_accounting_ready() != CUDA_SUCCESS)
        return -1;
    int cached = __atomic_load_n(&record_plus_one[ordinal], __ATOMIC_ACQUIRE);
    if (cached)
        return cached - 1;
    CUuuid u, gpu;
    size_t total = 0;
    char uuid[VGPU_UUID_LEN];
    if (CALL_CU(cuDeviceGetUuid_v2, &u, ordinal) != CUDA_SUCCESS ||
        CALL_CU(cuDeviceTotalMem_v2, &total, ordinal) != CUDA_SUCCESS)
        return -1;
    int mig = CALL_CU(cuDeviceGetUuid, &gpu, ordinal) == CUDA_SUCCESS &&
              memcmp(gpu.bytes, u.bytes, sizeof u.bytes) != 0;
    format_uuid(&u, mig, uuid, sizeof uuid);
    int rec = register_device(uuid, total, ordinal);
    if (rec >= 0)
        __atomic_store_n(&record_plus_one[ordinal], rec + 1, __ATOMIC_RELEASE);
    return rec;
}

int vgpu_current_record(CUresult *rc)
{
    CUdevice dev = -1;
    *rc = CALL_CU(cuCtxGetDevice, &dev);
    if (*rc != CUDA_SUCCESS)
        return -1;
    int rec = vgpu_record_of_ordinal(dev);
    if (rec < 0)
        *rc = VGPU_REFUSED_CU;
    return rec;
}

/* The CUDA ordinal an NVML device has for this process (CUDA_VISIBLE_DEVICES lists indices
 * or UUID prefixes; the driver stops at the first entry it cannot use), or -1. */
static int ordinal_of(unsigned int nvml_index, const char *uuid)
{
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (!visible)
        return nvml_index < VGPU_MAX_DEVICES ? (int)nvml_index : -1;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", visible);
    int ordinal = 0;
    for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t && ordinal < VGPU_MAX_DEVICES;
         t = strtok_r(NULL, ", ", &save), ordinal++) {
        char *end = NULL;
        unsigned long index = strtoul(t, &end, 10);
        if (end != t && *end == '\0') {
            if (index == nvml_index)
                return ordinal;
        } else if (strncmp(t, "GPU-", 4) == 0 || strncmp(t, "MIG-", 4) == 0) {
            if (strncmp(uuid, t, strlen(t)) == 0)
                return ordinal;
        } else {
            break;
        }
    }
    return -1;
}

int vgpu_record_of_nvml(nvmlDevice_t device)
{
    char uuid[96];
    unsigned int index = 0;
    nvmlMemory_t mem;
    if (vgpu_accounting_ready() != CUDA_SUCCESS ||
        CALL_NVML(nvmlDeviceGetUUID, device, uuid, sizeof uuid) != NVML_SUCCESS)
        return -1;
    int rec = vgpu_ledger_find(uuid);
    if (rec >= 0)
        return rec;
    /* No CUDA process of the container has used it yet: register it from the configuration
     * when the container can see it at all. */
    if (CALL_NVML(nvmlDeviceGetIndex, device, &index) != NVML_SUCCESS ||
        CALL_NVML(nvmlDeviceGetMemoryInfo, device, &mem) != NVML_SUCCESS)
        return -1;
    int ordinal = ordinal_of(index, uuid);
    return ordinal < 0 ? -1 : register_device(uuid, mem.total, ordinal);
}
