/* Contexts cost device memory (a few hundred MiB on real GPUs) that no allocation call shows:
 * each one is counted as HAMI_VGPU_CONTEXT_OVERHEAD bytes (default 0), from creation to
 * destruction; a primary context from its first retain to its last release (or a reset). */
#include <pthread.h>

#include "vgpu.h"

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static int primary_refs[VGPU_MAX_DEVICES]; /* this process's retains per CUDA ordinal */

static uint64_t overhead(void) { return vgpu_config()->ctx_overhead; }

/* Charges a context's overhead on `dev` before the driver creates it. */
#define CREATE_CONTEXT(pctx, dev, call)                                                        \
    VGPU_CREATE_COUNTED(KIND_CONTEXT, overhead() && (pctx) ? vgpu_record_of_ordinal(dev) : -1, \
                        overhead(), pctx, call)

CUresult hook_cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CREATE_CONTEXT(pctx, dev, CALL_CU(cuCtxCreate_v2, pctx, flags, dev));
}

CUresult hook_cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                             unsigned int flags, CUdevice dev)
{
    CREATE_CONTEXT(pctx, dev, CALL_CU(cuCtxCreate_v3, pctx, paramsArray, numParams, flags, dev));
}

CUresult hook_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                             CUdevice dev)
{
    CREATE_CONTEXT(pctx, dev, CALL_CU(cuCtxCreate_v4, pctx, params, flags, dev));
}

CUresult hook_cuCtxDestroy_v2(CUcontext ctx)
{
    VGPU_RELEASE_COUNTED(KIND_CONTEXT, ctx, CALL_CU(cuCtxDestroy_v2, ctx));
}

static int valid_ordinal(CUdevice dev) { return dev >= 0 && dev < VGPU_MAX_DEVICES; }

CUresult hook_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    int rec = overhead() && valid_ordinal(dev) ? vgpu_record_of_ordinal(dev) : -1;
    if (rec < 0)
        return CALL_CU(cuDevicePrimaryCtxRetain, pctx, dev);
    pthread_mutex_lock(&primary_lock);
    int first = primary_refs[dev] == 0;
    CUresult rc = first ? vgpu_count_begin(rec, overhead()) : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS)
        rc = CALL_CU(cuDevicePrimaryCtxRetain, pctx, dev);
    if (rc == CUDA_SUCCESS)
        primary_refs[dev]++;
    else if (first)
        vgpu_uncharge(rec, overhead());
    pthread_mutex_unlock(&primary_lock);
    return rc;
}

/* Release (one reference) or reset (all of them): the overhead goes when none is left. */
static CUresult primary_drop(CUdevice dev, int reset)
{
    int rec = overhead() && valid_ordinal(dev) ? vgpu_record_of_ordinal(dev) : -1;
    if (rec < 0)
        return reset ? CALL_CU(cuDevicePrimaryCtxReset_v2, dev)
                     : CALL_CU(cuDevicePrimaryCtxRelease_v2, dev);
    pthread_mutex_lock(&primary_lock);
    CUresult rc = reset ? CALL_CU(cuDevicePrimaryCtxReset_v2, dev)
                        : CALL_CU(cuDevicePrimaryCtxRelease_v2, dev);
    if (rc == CUDA_SUCCESS && primary_refs[dev] > 0) {
        primary_refs[dev] = reset ? 0 : primary_refs[dev] - 1;
        if (primary_refs[dev] == 0)
            vgpu_uncharge(rec, overhead());
    }
    pthread_mutex_unlock(&primary_lock);
    return rc;
}

CUresult hook_cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_drop(dev, 0); }
CUresult hook_cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_drop(dev, 1); }
