/* cuInit, versions, error strings and device queries. */
#include <stdio.h>
#include <string.h>

#include "cu_internal.h"

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

void sim_device_uuid_bytes(int dev, uint8_t out[16])
{
    const char *p = sim_device(dev)->uuid + 4; /* skip "GPU-" */
    for (int i = 0; i < 16; p++) {
        if (*p == '-')
            continue;
        unsigned int byte = 0;
        sscanf(p, "%2x", &byte);
        out[i++] = (uint8_t)byte;
        p++;
    }
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device_uuid_bytes(dev, (uint8_t *)uuid->bytes);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return device_uuid(uuid, dev); }
SIM_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return device_uuid(uuid, dev); }

SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc == CUDA_SUCCESS && !bytes)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *bytes = sim_device(dev)->total_bytes;
    return rc;
}

/* Values of a data-centre GPU of the device's generation; SMs and CC from the config. */
static int attribute(const struct sim_device *d, CUdevice_attribute a, int *ok)
{
    *ok = 1;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return (int)d->sms;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return d->cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return d->cc_minor;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 166912;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 167936;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1410000;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 1215000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 41943040;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return (int)d->pci_bus;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return d->numa_node;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
        return 1;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_NONE;
    default: *ok = 0; return 0;
    }
}

SIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    int ok;
    int v = attribute(sim_device(dev), attrib, &ok);
    /* Attributes this simulator does not model read as 0, as unsupported features do. */
    *pi = ok ? v : 0;
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
