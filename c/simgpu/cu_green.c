/* Green contexts (CUDA 12.4+): contexts over a partition of a device's SMs. A real driver of
 * this version has the entry points, and frameworks resolve them at start-up (PyTorch fails
 * to start when they are absent), so the simulator exports them; partitions are not modelled,
 * so each says CUDA_ERROR_NOT_SUPPORTED (and logs why), as a driver does for a feature the
 * device lacks. */
#include "cu_internal.h"

static CUresult unsupported(const char *api)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_driver_log("%s: green contexts (SM partitions) are not modelled by the simulated driver",
                   api);
    return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
                                  unsigned int flags)
{
    (void)phCtx, (void)desc, (void)dev, (void)flags;
    return unsupported("cuGreenCtxCreate");
}

/* No green context can exist: every handle is invalid. */
#define NO_SUCH_GREEN_CTX(h) ((void)(h), sim_cu_ready() ? sim_cu_ready() : CUDA_ERROR_INVALID_HANDLE)

SIM_API CUresult cuGreenCtxDestroy(CUgreenCtx hCtx) { return NO_SUCH_GREEN_CTX(hCtx); }

SIM_API CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
    (void)pContext;
    return NO_SUCH_GREEN_CTX(hCtx);
}

SIM_API CUresult cuGreenCtxGetDevResource(CUgreenCtx hCtx, CUdevResource *resource,
                                          CUdevResourceType type)
{
    (void)resource, (void)type;
    return NO_SUCH_GREEN_CTX(hCtx);
}

SIM_API CUresult cuGreenCtxRecordEvent(CUgreenCtx hCtx, CUevent hEvent)
{
    (void)hEvent;
    return NO_SUCH_GREEN_CTX(hCtx);
}

SIM_API CUresult cuGreenCtxWaitEvent(CUgreenCtx hCtx, CUevent hEvent)
{
    (void)hEvent;
    return NO_SUCH_GREEN_CTX(hCtx);
}

SIM_API CUresult cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx greenCtx,
                                        unsigned int flags, int priority)
{
    (void)phStream, (void)flags, (void)priority;
    return NO_SUCH_GREEN_CTX(greenCtx);
}

SIM_API CUresult cuGreenCtxGetId(CUgreenCtx greenCtx, unsigned long long *greenCtxId)
{
    (void)greenCtxId;
    return NO_SUCH_GREEN_CTX(greenCtx);
}

SIM_API CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource *resource,
                                        CUdevResourceType type)
{
    (void)device, (void)resource, (void)type;
    return unsupported("cuDeviceGetDevResource");
}

SIM_API CUresult cuCtxGetDevResource(CUcontext hCtx, CUdevResource *resource,
                                     CUdevResourceType type)
{
    (void)hCtx, (void)resource, (void)type;
    return unsupported("cuCtxGetDevResource");
}

SIM_API CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
                                             const CUdevResource *input, CUdevResource *remainder,
                                             unsigned int flags, unsigned int minCount)
{
    (void)result, (void)nbGroups, (void)input, (void)remainder, (void)flags, (void)minCount;
    return unsupported("cuDevSmResourceSplitByCount");
}

SIM_API CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources,
                                           unsigned int nbResources)
{
    (void)phDesc, (void)resources, (void)nbResources;
    return unsupported("cuDevResourceGenerateDesc");
}
