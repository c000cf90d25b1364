/* A context's settings: flags, limits, cache preference, stream priorities, and the device
 * pair queries (peer access: none between simulated devices). */
#include <stdio.h>
#include <string.h>

#include "cu_internal.h"

static CUresult current(struct CUctx_st **c) { return sim_require_ctx(c); }

/* Real drivers' defaults; the stack size is per thread. */
static size_t default_limit(CUlimit limit)
{
    switch (limit) {
    case CU_LIMIT_STACK_SIZE: return 1024;
    case CU_LIMIT_PRINTF_FIFO_SIZE: return 1 << 20;
    case CU_LIMIT_MALLOC_HEAP_SIZE: return 8 << 20;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH: return 2;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: return 2048;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY: return 64;
    case CU_LIMIT_SHMEM_SIZE: return 49152;
    default: return 0;
    }
}

SIM_API CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    struct CUctx_st *c = NULL;
    CUresult rc = current(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pvalue || limit < 0 || limit >= SIM_LIMITS)
        return limit >= SIM_LIMITS ? CUDA_ERROR_UNSUPPORTED_LIMIT : CUDA_ERROR_INVALID_VALUE;
    *pvalue = (c->limits_set & (1u << limit)) ? c->limits[limit] : default_limit(limit);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct CUctx_st *c = NULL;
    CUresult rc = current(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (limit < 0 || limit >= SIM_LIMITS || limit == CU_LIMIT_SHMEM_SIZE)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    c->limits[limit] = value;
    c->limits_set |= 1u << limit;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetFlags(unsigned int *flags)
{
    struct CUctx_st *c = NULL;
    CUresult rc = current(&c);
    if (rc == CUDA_SUCCESS && !flags)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *flags = c->flags;
    return rc;
}

SIM_API CUresult cuCtxSetFlags(unsigned int flags)
{
    struct CUctx_st *c = NULL;
    CUresult rc = current(&c);
    if (rc == CUDA_SUCCESS && (flags & ~(unsigned)CU_CTX_FLAGS_MASK))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        c->flags = flags;
    return rc;
}

SIM_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    struct CUctx_st *c = ctx;
    CUresult rc = ctx ? sim_cu_ready() : current(&c);
    if (rc == CUDA_SUCCESS && (!version || c->magic != MAGIC_CTX))
        rc = version ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *version = 3020; /* contexts of the v2 API and later */
    return rc;
}

SIM_API CUresult cuCtxGetCacheConfig(CUfunc_cache *config)
{
    struct CUctx_st *c = NULL;
    CUresult rc = current(&c);
    if (rc == CUDA_SUCCESS && !config)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *config = c->cache_config;
    return rc;
}

SIM_API CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    struct CUctx_st *c = NULL;
    CUresult rc = current(&c);
    if (rc == CUDA_SUCCESS && (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        c->cache_config = config;
    return rc;
}

SIM_API CUresult cuCtxGetSharedMemConfig(CUsharedconfig *config)
{
    struct CUctx_st *c = NULL;
    CUresult rc = current(&c);
    if (rc == CUDA_SUCCESS && !config)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    return rc;
}

SIM_API CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    struct CUctx_st *c = NULL;
    CUresult rc = current(&c);
    if (rc == CUDA_SUCCESS && (config < 0 || config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE))
        rc = CUDA_ERROR_INVALID_VALUE;
    return rc; /* fixed bank size on every GPU since Volta */
}

SIM_API CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    struct CUctx_st *c = NULL;
    CUresult rc = current(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5; /* what data-centre GPUs since Ampere report */
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxResetPersistingL2Cache(void)
{
    struct CUctx_st *c = NULL;
    return current(&c);
}

SIM_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    CUresult rc = sim_check_device(dev);
    if (rc == CUDA_SUCCESS)
        rc = sim_check_device(peerDev);
    if (rc == CUDA_SUCCESS && !canAccessPeer)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *canAccessPeer = 0; /* simulated devices share no memory with each other */
    return rc;
}

SIM_API CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                         CUdevice dstDevice)
{
    CUresult rc = sim_check_device(srcDevice);
    if (rc == CUDA_SUCCESS)
        rc = sim_check_device(dstDevice);
    if (rc == CUDA_SUCCESS && (!value || srcDevice == dstDevice || attrib < 1 || attrib > 5))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *value = 0;
    return rc;
}

SIM_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dev || !pciBusId)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned int domain = 0, bus = 0, device = 0, function = 0;
    if (sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4 &&
        sscanf(pciBusId, "%x:%x.%x", &bus, &device, &function) != 3)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < sim_device_count(); i++) {
        if (domain == 0 && device == 0 && sim_device(i)->pci_bus == bus) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

/* No simulated device reaches another's memory (cuDeviceCanAccessPeer says 0). */
SIM_API CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    struct CUctx_st *c = NULL;
    CUresult rc = current(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!peerContext || peerContext->magic != MAGIC_CTX || Flags)
        return CUDA_ERROR_INVALID_VALUE;
    return peerContext->dev == c->dev ? CUDA_ERROR_INVALID_DEVICE
                                      : CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
}

SIM_API CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    struct CUctx_st *c = NULL;
    CUresult rc = current(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!peerContext || peerContext->magic != MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}
