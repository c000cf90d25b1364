/* cuInit, versions, error strings and device queries. */
#include <stdio.h>
#include <string.h>

#include "cu_internal.h"
#include "mig.h"

const int sim_honours_cuda_visible = 1; /* libcuda applies CUDA_VISIBLE_DEVICES */

static int initialised; /* set once by a successful cuInit */

CUresult sim_cu_ready(void) { return initialised ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED; }

CUresult sim_check_device(CUdevice dev)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    return (dev >= 0 && dev < sim_device_count()) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

SIM_API CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    switch (sim_open()) {
    case SIM_READY:
        __atomic_store_n(&initialised, 1, __ATOMIC_RELEASE);
        return CUDA_SUCCESS;
    case SIM_BAD_CONFIG:
        return CUDA_ERROR_NO_DEVICE;
    default:
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
}

SIM_API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = sim_driver_version();
    return CUDA_SUCCESS;
}

#define RESULT_NAME(name, value, text) case name: return #name;
#define RESULT_TEXT(name, value, text) case name: return text;
static const char *result_name(CUresult r)
{
    switch (r) { HAMI_CU_RESULTS(RESULT_NAME) default: return NULL; }
}
static const char *result_text(CUresult r)
{
    switch (r) { HAMI_CU_RESULTS(RESULT_TEXT) default: return NULL; }
}

SIM_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = result_name(error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = result_text(error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_cu_ready();
    *count = rc == CUDA_SUCCESS ? sim_device_count() : 0;
    return rc;
}

SIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_check_device(ordinal);
    if (rc == CUDA_SUCCESS)
        *device = ordinal;
    return rc;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", sim_device(dev)->name);
    return CUDA_SUCCESS;
}

static void uuid_bytes(const char *uuid, uint8_t out[16])
{
    const char *p = uuid + 4; /* skip "GPU-" or "MIG-" */
    for (int i = 0; i < 16; p++) {
        if (*p == '-')
            continue;
        unsigned int byte = 0;
        sscanf(p, "%2x", &byte);
        out[i++] = (uint8_t)byte;
        p++;
    }
}

void sim_device_uuid_bytes(int dev, uint8_t out[16]) { uuid_bytes(sim_device(dev)->uuid, out); }

/* The driver's two answers for a MIG device: cuDeviceGetUuid_v2 the MIG device's own UUID,
 * the original cuDeviceGetUuid its GPU's (the same for a whole GPU). */
static CUresult device_uuid(CUuuid *uuid, CUdevice dev, int v2)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    const struct sim_device *parent = v2 ? NULL : sim_mig_parent(sim_device(dev));
    uuid_bytes(parent ? parent->uuid : sim_device(dev)->uuid, (uint8_t *)uuid->bytes);
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return device_uuid(uuid, dev, 0); }
SIM_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return device_uuid(uuid, dev, 1);
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc == CUDA_SUCCESS && !bytes)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *bytes = sim_device(dev)->total_bytes;
    return rc;
}

SIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if (attrib <= 0 || attrib > CU_DEVICE_ATTRIBUTE_MAX_OVERSIZED_SHARED_MEMORY_PER_BLOCK + 16)
        return CUDA_ERROR_INVALID_VALUE; /* not an attribute of this driver version */
    *pi = sim_device_attribute(sim_device(dev), attrib);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "0000:%02X:00.0", sim_device(dev)->pci_bus);
    return CUDA_SUCCESS;
}
