/* Primary and created contexts, and each thread's stack of current contexts. */
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

#define CTX_STACK_DEPTH 32

static struct CUctx_st primaries[SIM_MAX_DEVICES];
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

static __thread struct CUctx_st *ctx_stack[CTX_STACK_DEPTH];
static __thread int ctx_depth;

static struct CUctx_st *current_ctx(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }

CUresult sim_require_ctx(struct CUctx_st **out)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct CUctx_st *c = current_ctx();
    if (!c || c->magic != MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

static void init_ctx(struct CUctx_st *c, int dev, unsigned int flags, int primary)
{
    static unsigned long long next_id = 1;
    memset(c, 0, sizeof *c);
    c->id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    c->magic = MAGIC_CTX;
    c->dev = dev;
    c->flags = flags;
    c->primary = primary;
    c->null_stream.magic = MAGIC_STREAM;
    c->null_stream.ctx = c;
}

/* A context makes the process appear on the device (nvidia-smi lists it) and costs device
 * memory through no allocation call, as a real context does: the model's default or
 * HAMI_SIM_CTX_OVERHEAD. */
static CUresult attach(int dev)
{
    sim_context_count(dev, 1);
    uint64_t overhead = sim_ctx_overhead(dev);
    if (overhead && sim_charge(dev, overhead) < 0) {
        sim_context_count(dev, -1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static void detach(struct CUctx_st *c)
{
    sim_ctx_storage_release(c);
    uint64_t overhead = sim_ctx_overhead(c->dev);
    if (overhead)
        sim_uncharge(c->dev, overhead);
    if (c->module_bytes)
        sim_uncharge(c->dev, c->module_bytes);
    c->module_bytes = 0;
    sim_context_count(c->dev, -1);
}

/* Lazy loading (the default since CUDA 12.2) loads a module's code and data into a context
 * when its kernels are first used, not when the module is loaded. */
CUresult sim_ctx_kernels_used(struct CUctx_st *c)
{
    if (__atomic_load_n(&c->module_bytes, __ATOMIC_RELAXED))
        return CUDA_SUCCESS;
    uint64_t bytes = sim_module_memory();
    if (!bytes)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&primary_lock);
    CUresult rc = CUDA_SUCCESS;
    if (!c->module_bytes) {
        if (sim_charge(c->dev, bytes) == 0)
            c->module_bytes = bytes;
        else
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&primary_lock);
    return rc;
}

static CUresult push(struct CUctx_st *c)
{
    if (ctx_depth >= CTX_STACK_DEPTH)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = c;
    return CUDA_SUCCESS;
}

/* The primary context of a device exists (inactive) before anyone retains it. */
static struct CUctx_st *primary_object(CUdevice dev)
{
    struct CUctx_st *c = &primaries[dev];
    if (c->magic != MAGIC_CTX) /* keeps flags set by cuDevicePrimaryCtxSetFlags before */
        init_ctx(c, dev, c->flags, 1);
    return c;
}

CUresult sim_primary_ctx(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc == CUDA_SUCCESS && !pctx)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&primary_lock);
        *pctx = primary_object(dev);
        pthread_mutex_unlock(&primary_lock);
    }
    return rc;
}

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary_lock);
    struct CUctx_st *c = primary_object(dev);
    if (c->refcount == 0)
        rc = attach(dev);
    if (rc == CUDA_SUCCESS) {
        c->refcount++;
        *pctx = c;
    }
    pthread_mutex_unlock(&primary_lock);
    return rc;
}

static CUresult primary_release(CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&primary_lock);
    struct CUctx_st *c = &primaries[dev];
    if (c->refcount <= 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--c->refcount == 0) {
        detach(c);
    }
    pthread_mutex_unlock(&primary_lock);
    return rc;
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }
SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }

static CUresult primary_reset(CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&primary_lock);
    if (primaries[dev].refcount > 0) {
        primaries[dev].refcount = 0;
        detach(&primaries[dev]);
    }
    pthread_mutex_unlock(&primary_lock);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset(dev); }
SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset(dev); }

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = primaries[dev].flags;
    *active = primaries[dev].refcount > 0;
    return CUDA_SUCCESS;
}

static CUresult primary_set_flags(CUdevice dev, unsigned int flags)
{
    CUresult rc = sim_check_device(dev);
    if (rc == CUDA_SUCCESS)
        primaries[dev].flags = flags;
    return rc;
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    return primary_set_flags(dev, flags);
}
SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return primary_set_flags(dev, flags);
}

static CUresult create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c = malloc(sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    init_ctx(c, dev, flags, 0);
    rc = attach(dev);
    if (rc == CUDA_SUCCESS)
        rc = push(c);
    if (rc != CUDA_SUCCESS) {
        free(c);
        return rc;
    }
    *pctx = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    (void)paramsArray; /* SM affinity is not modelled: the context gets the whole device */
    (void)numParams;
    return create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    (void)ctxCreateParams;
    return create(pctx, flags, dev);
}

SIM_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx || ctx->magic != MAGIC_CTX || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* Drop it from this thread's stack; other threads' stacks see MAGIC_DEAD and refuse it.
     * The memory is kept so that a stale handle never reads freed memory. */
    int w = 0;
    for (int r = 0; r < ctx_depth; r++)
        if (ctx_stack[r] != ctx)
            ctx_stack[w++] = ctx_stack[r];
    ctx_depth = w;
    ctx->magic = MAGIC_DEAD;
    sim_tl_forget(NULL, ctx); /* its streams' lanes are freed once they drain */
    detach(ctx);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx && ctx->magic != MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx) {
        if (ctx_depth)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (ctx_depth)
        ctx_stack[ctx_depth - 1] = ctx;
    else
        ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && !pctx)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *pctx = current_ctx();
    return rc;
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx || ctx->magic != MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    return push(ctx);
}

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

static CUresult ctx_or_current(CUcontext ctx, struct CUctx_st **out)
{
    if (!ctx)
        return sim_require_ctx(out);
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && ctx->magic != MAGIC_CTX)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS)
        *out = ctx;
    return rc;
}

static CUresult get_device(CUdevice *device, CUcontext ctx)
{
    struct CUctx_st *c = NULL;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc == CUDA_SUCCESS && !device)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *device = c->dev;
    return rc;
}

SIM_API CUresult cuCtxGetDevice(CUdevice *device) { return get_device(device, NULL); }
SIM_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) { return get_device(device, ctx); }

static CUresult synchronize(CUcontext ctx)
{
    struct CUctx_st *c = NULL;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc == CUDA_SUCCESS)
        rc = sim_capture_check(); /* waits for every stream, a capturing one too */
    if (rc == CUDA_SUCCESS) {
        sim_ctx_wait(c);
        sim_pools_trim(c->dev);
    }
    return rc;
}

SIM_API CUresult cuCtxSynchronize(void) { return synchronize(NULL); }
SIM_API CUresult cuCtxSynchronize_v2(CUcontext ctx) { return synchronize(ctx); }

CUresult sim_ctx_id(CUcontext ctx, unsigned long long *id)
{
    struct CUctx_st *c = NULL;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc == CUDA_SUCCESS && !id)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *id = c->id;
    return rc;
}

SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId) { return sim_ctx_id(ctx, ctxId); }
