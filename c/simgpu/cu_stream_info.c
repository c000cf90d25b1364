/* What a stream says about itself (priority, flags, ID, context, device, capture state), and
 * host functions queued on a stream. */
#include <stdlib.h>

#include "cu_internal.h"

#define STREAM_QUERY(name, type, expr)                                                        \
    static CUresult name##_of(CUstream h, type *out, int pt)                                  \
    {                                                                                         \
        struct CUstream_st *s = NULL;                                                         \
        CUresult rc = sim_stream(h, pt, &s);                                                  \
        if (rc == CUDA_SUCCESS && !out)                                                       \
            rc = CUDA_ERROR_INVALID_VALUE;                                                    \
        if (rc == CUDA_SUCCESS)                                                               \
            *out = (expr);                                                                    \
        return rc;                                                                            \
    }                                                                                         \
    SIM_API CUresult cuStreamGet##name(CUstream h, type *out) { return name##_of(h, out, 0); } \
    SIM_API CUresult cuStreamGet##name##_ptsz(CUstream h, type *out) { return name##_of(h, out, 1); }

/* the legacy stream is ID 1 and a thread's per-thread stream 2 in every context */
STREAM_QUERY(Priority, int, s->priority)
STREAM_QUERY(Flags, unsigned int, s->flags)
STREAM_QUERY(Id, unsigned long long,
             s == &s->ctx->null_stream ? 1 : s->id ? s->id : 2)
STREAM_QUERY(Ctx, CUcontext, s->ctx)
STREAM_QUERY(Device, CUdevice, s->ctx->dev)

static CUresult ctx_v2(CUstream h, CUcontext *pctx, CUgreenCtx *green, int pt)
{
    CUresult rc = Ctx_of(h, pctx, pt);
    if (rc == CUDA_SUCCESS && green)
        *green = NULL; /* no green contexts */
    return rc;
}

SIM_API CUresult cuStreamGetCtx_v2(CUstream h, CUcontext *pctx, CUgreenCtx *pGreenCtx)
{
    return ctx_v2(h, pctx, pGreenCtx, 0);
}
SIM_API CUresult cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext *pctx, CUgreenCtx *pGreenCtx)
{
    return ctx_v2(h, pctx, pGreenCtx, 1);
}

/* The capture's graph here holds kernels only, so no node is ever a dependency. */
static CUresult capture_info(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id,
                             CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
                             size_t *ndeps, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraph_st *g = s->capture;
    *status = !g ? CU_STREAM_CAPTURE_STATUS_NONE
                 : g->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                  : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (g && id)
        *id = g->capture_id;
    if (graph)
        *graph = g;
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = 0;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                           CUgraph *g, const CUgraphNode **d, size_t *n)
{
    return capture_info(h, st, id, g, d, NULL, n, 0);
}
SIM_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus *st,
                                                cuuint64_t *id, CUgraph *g, const CUgraphNode **d,
                                                size_t *n)
{
    return capture_info(h, st, id, g, d, NULL, n, 1);
}
SIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                           CUgraph *g, const CUgraphNode **d,
                                           const CUgraphEdgeData **e, size_t *n)
{
    return capture_info(h, st, id, g, d, e, n, 0);
}
SIM_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus *st,
                                                cuuint64_t *id, CUgraph *g, const CUgraphNode **d,
                                                const CUgraphEdgeData **e, size_t *n)
{
    return capture_info(h, st, id, g, d, e, n, 1);
}

/* A host function runs once the stream's earlier work is done. The simulator runs it in the
 * calling thread after waiting for that point: its order with the stream's work is the real
 * one; the caller is held back meanwhile. It cannot be captured. */
static CUresult host_func(CUstream h, CUhostFn fn, void *data, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    sim_tl_sync_stream(s, 0);
    fn(data);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *data) { return host_func(h, fn, data, 0); }
SIM_API CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *data)
{
    return host_func(h, fn, data, 1);
}

struct callback {
    CUstream stream;
    CUstreamCallback fn;
    void *data;
};

static void run_callback(void *p)
{
    struct callback *cb = p;
    cb->fn(cb->stream, CUDA_SUCCESS, cb->data);
}

static CUresult add_callback(CUstream h, CUstreamCallback fn, void *data, unsigned int flags,
                             int pt)
{
    if (flags != 0 || !fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct callback cb = {h, fn, data};
    return host_func(h, run_callback, &cb, pt);
}

SIM_API CUresult cuStreamAddCallback(CUstream h, CUstreamCallback fn, void *data, unsigned int f)
{
    return add_callback(h, fn, data, f, 0);
}
SIM_API CUresult cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback fn, void *data,
                                          unsigned int f)
{
    return add_callback(h, fn, data, f, 1);
}
