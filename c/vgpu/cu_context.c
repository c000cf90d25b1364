/* Contexts cost device memory (a few hundred MiB on real GPUs) that no allocation call shows.
 * The driver's own figure for it is counted by footprint.c, read right after this process's
 * contexts are created. Before the driver is asked, each new context is charged an estimate:
 * what the container's last new context cost by the driver's count (learned by footprint.c),
 * or HAMI_VGPU_CONTEXT_OVERHEAD (default 0) if larger; so a context that cannot fit under the
 * limit is refused before it exists, and the footprint counts only what the driver spent
 * beyond the estimate. A created context counts from creation to destruction; a primary
 * context from its first retain to its last release (or a reset). */
#include <pthread.h>

#include "vgpu.h"

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static int primary_refs[VGPU_MAX_DEVICES]; /* this process's retains per CUDA ordinal */
static uint64_t primary_charged[VGPU_MAX_DEVICES]; /* the estimate charged at the first one */

/* What a new context on record `rec` is charged before the driver is asked. */
static uint64_t estimate(int rec)
{
    uint64_t configured = vgpu_config()->ctx_overhead;
    uint64_t learned = rec >= 0 ? __atomic_load_n(&vgpu_device_at(rec)->ctx_estimate,
                                                  __ATOMIC_RELAXED) : 0;
    return learned > configured ? learned : configured;
}

static int valid_ordinal(CUdevice dev) { return dev >= 0 && dev < VGPU_MAX_DEVICES; }

static int record_of(CUdevice dev) { return valid_ordinal(dev) ? vgpu_record_of_ordinal(dev) : -1; }

/* Before the driver creates a context on `dev`: reserves its estimate (*bytes). */
static CUresult begin_context(CUcontext *pctx, int rec, uint64_t *bytes)
{
    vgpu_footprint_before_context(rec);
    *bytes = pctx && rec >= 0 ? estimate(rec) : 0;
    return *bytes ? vgpu_count_begin(rec, *bytes) : CUDA_SUCCESS;
}

/* Whether the container is over its limit now that a context exists: the context alone
 * (its first one: nothing was learnt to charge beforehand) or beside what the container holds
 * took more than the cap allows. The driver already spent the memory; the context goes again,
 * so that nothing runs over the cap. */
static int context_overflows(int rec, CUdevice dev)
{
    struct vgpu_usage u;
    if (rec < 0 || vgpu_usage_of(rec, &u) < 0 || !u.limit || u.used <= u.limit)
        return 0;
    vgpu_log(VGPU_LOG_ERROR, "device %d: a CUDA context took the container to %llu MiB by the "
             "driver's count, over its limit of %llu bytes (%llu MiB): context refused "
             "(CUDA_DEVICE_MEMORY_LIMIT without a suffix is bytes: 1024m is 1024 MiB)", dev,
             (unsigned long long)(u.used >> 20), (unsigned long long)u.limit,
             (unsigned long long)(u.limit >> 20));
    return 1;
}

/* After it answered `rc`: records the context, then reads the driver's figure. */
static CUresult end_context(CUresult rc, CUcontext *pctx, int rec, uint64_t bytes)
{
    if (bytes)
        rc = vgpu_count_end(rc, KIND_CONTEXT, rc == CUDA_SUCCESS ? (uintptr_t)*pctx : 0, rec,
                            bytes);
    if (rc == CUDA_SUCCESS)
        vgpu_footprint_after_context(rec, bytes);
    return rc;
}

static CUresult create_context(CUresult rc, CUcontext *pctx, CUdevice dev, int rec,
                               uint64_t bytes)
{
    rc = end_context(rc, pctx, rec, bytes);
    if (rc == CUDA_SUCCESS && context_overflows(rec, dev)) {
        hook_cuCtxDestroy_v2(*pctx);
        *pctx = NULL;
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return rc;
}

#define CREATE_CONTEXT(pctx, dev, call)                                                        \
    do {                                                                                       \
        int rec_ = record_of(dev);                                                             \
        uint64_t bytes_ = 0;                                                                   \
        CUresult rc_ = begin_context(pctx, rec_, &bytes_);                                     \
        return rc_ == CUDA_SUCCESS ? create_context(call, pctx, dev, rec_, bytes_) : rc_;      \
    } while (0)

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
    struct vgpu_entry e;
    int had = vgpu_map_take(KIND_CONTEXT, (uintptr_t)ctx, &e) == 0;
    CUdevice dev = -1;
    int rec = CALL_CU(cuCtxGetDevice_v2, &dev, ctx) == CUDA_SUCCESS ? record_of(dev) : -1;
    CUresult rc = vgpu_count_release(CALL_CU(cuCtxDestroy_v2, ctx), KIND_CONTEXT,
                                     (uintptr_t)ctx, had, &e);
    for (int r = 0; rc == CUDA_SUCCESS && r < VGPU_MAX_DEVICES; r++)
        if (r == rec || (rec < 0 && vgpu_footprint_of(r))) /* the driver gave memory back */
            vgpu_footprint_refresh(r);
    return rc;
}

CUresult hook_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    int rec = record_of(dev);
    if (rec < 0)
        return CALL_CU(cuDevicePrimaryCtxRetain, pctx, dev);
    pthread_mutex_lock(&primary_lock);
    int first = primary_refs[dev] == 0;
    uint64_t bytes = 0;
    CUresult rc = first ? begin_context(pctx, rec, &bytes) : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS)
        rc = CALL_CU(cuDevicePrimaryCtxRetain, pctx, dev);
    if (rc == CUDA_SUCCESS) {
        primary_refs[dev]++;
        if (first)
            primary_charged[dev] = bytes;
    } else if (first) {
        vgpu_uncharge(rec, bytes);
    }
    pthread_mutex_unlock(&primary_lock);
    if (rc == CUDA_SUCCESS && first) {
        vgpu_footprint_after_context(rec, bytes);
        if (context_overflows(rec, dev)) {
            hook_cuDevicePrimaryCtxRelease_v2(dev);
            *pctx = NULL;
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    return rc;
}

/* Release (one reference) or reset (all of them): the overhead goes when none is left. */
static CUresult primary_drop(CUdevice dev, int reset)
{
    int rec = record_of(dev);
    if (rec < 0)
        return reset ? CALL_CU(cuDevicePrimaryCtxReset_v2, dev)
                     : CALL_CU(cuDevicePrimaryCtxRelease_v2, dev);
    pthread_mutex_lock(&primary_lock);
    CUresult rc = reset ? CALL_CU(cuDevicePrimaryCtxReset_v2, dev)
                        : CALL_CU(cuDevicePrimaryCtxRelease_v2, dev);
    int gone = 0;
    if (rc == CUDA_SUCCESS && primary_refs[dev] > 0) {
        primary_refs[dev] = reset ? 0 : primary_refs[dev] - 1;
        gone = primary_refs[dev] == 0;
        if (gone)
            vgpu_uncharge(rec, primary_charged[dev]);
    }
    pthread_mutex_unlock(&primary_lock);
    if (gone)
        vgpu_footprint_refresh(rec);
    return rc;
}

CUresult hook_cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_drop(dev, 0); }
CUresult hook_cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_drop(dev, 1); }
