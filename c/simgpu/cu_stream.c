/* Streams, events and synchronisation: the API side of the shared device timeline
 * (timeline.h: time slices between processes, streams of a process overlapping, events
 * stamped when the device reaches them; cu_wait.c: queueing and waiting). */
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

/* The per-thread default stream of the calling thread, for the current context. */
static __thread struct CUstream_st thread_stream;

static struct CUstream_st *per_thread_stream(struct CUctx_st *c)
{
    if (thread_stream.ctx != c || thread_stream.magic != MAGIC_STREAM) {
        memset(&thread_stream, 0, sizeof thread_stream);
        thread_stream.magic = MAGIC_STREAM;
        thread_stream.ctx = c;
    }
    return &thread_stream;
}

CUresult sim_stream(CUstream h, int per_thread, struct CUstream_st **out)
{
    struct CUctx_st *c = NULL;
    CUresult rc = sim_require_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (h == NULL)
        *out = per_thread ? per_thread_stream(c) : &c->null_stream;
    else if (h == CU_STREAM_LEGACY)
        *out = &c->null_stream;
    else if (h == CU_STREAM_PER_THREAD)
        *out = per_thread_stream(c);
    else if (h->magic == MAGIC_STREAM && h->ctx && h->ctx->magic == MAGIC_CTX)
        *out = h;
    else
        return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

CUresult sim_stream_enqueue(struct CUstream_st *s, const struct sim_node *kernel)
{
    if (s->capture)
        return sim_graph_add_kernel(s->capture, kernel);
    /* A replayed node is queued by its recorded shape; one without a function takes the whole
     * device. */
    uint32_t sms = sim_device(s->ctx->dev)->sms;
    if (kernel->func) {
        uint64_t blocks = (uint64_t)kernel->grid[0] * kernel->grid[1] * kernel->grid[2];
        if (blocks < sms)
            sms = (uint32_t)blocks;
    }
    return sim_tl_kernel(s, kernel->duration_ns, sms);
}

void sim_ctx_wait(struct CUctx_st *ctx) { sim_tl_sync_ctx(ctx, sim_ctx_spins(ctx)); }

static CUresult create_stream(CUstream *phStream, unsigned int flags, int priority)
{
    struct CUctx_st *c = NULL;
    CUresult rc = sim_require_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    static unsigned long long next_id = 0x100; /* below: the legacy and per-thread streams */
    s->magic = MAGIC_STREAM;
    s->ctx = c;
    s->flags = flags;
    s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority; /* clamped, as the driver does */
    s->id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    *phStream = s;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return create_stream(phStream, Flags, 0);
}

SIM_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return create_stream(phStream, flags, priority);
}

SIM_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
        hStream->magic != MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Queued work still completes on the device timeline; only the handle goes. */
    sim_tl_forget(hStream, NULL);
    hStream->magic = MAGIC_DEAD;
    free(hStream);
    return CUDA_SUCCESS;
}

static CUresult stream_sync(CUstream h, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s == &s->ctx->null_stream && (rc = sim_capture_check()) != CUDA_SUCCESS)
        return rc; /* the legacy stream waits for every blocking stream, capturing ones too */
    sim_tl_sync_stream(s, sim_ctx_spins(s->ctx));
    sim_pools_trim(s->ctx->dev);
    return CUDA_SUCCESS;
}

static CUresult stream_query(CUstream h, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    return sim_tl_stream_idle(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

static CUresult stream_wait_event(CUstream h, CUevent ev, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ev || ev->magic != MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    return sim_tl_wait_event(s, ev);
}

SIM_API CUresult cuStreamSynchronize(CUstream h) { return stream_sync(h, 0); }
SIM_API CUresult cuStreamSynchronize_ptsz(CUstream h) { return stream_sync(h, 1); }
SIM_API CUresult cuStreamQuery(CUstream h) { return stream_query(h, 0); }
SIM_API CUresult cuStreamQuery_ptsz(CUstream h) { return stream_query(h, 1); }
SIM_API CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int f)
{
    (void)f;
    return stream_wait_event(h, e, 0);
}
SIM_API CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int f)
{
    (void)f;
    return stream_wait_event(h, e, 1);
}

SIM_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct CUctx_st *c = NULL;
    CUresult rc = sim_require_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phEvent || (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                         CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = MAGIC_EVENT;
    e->flags = Flags;
    *phEvent = e;
    return CUDA_SUCCESS;
}

static CUresult event_record(CUevent ev, CUstream h, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ev || ev->magic != MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    ev->captured = s->capture != NULL;
    /* The device stamps the event when the stream reaches it while the stream's context
     * holds the device (timeline.h). */
    return sim_tl_record(s, ev);
}

SIM_API CUresult cuEventRecord(CUevent e, CUstream h) { return event_record(e, h, 0); }
SIM_API CUresult cuEventRecord_ptsz(CUevent e, CUstream h) { return event_record(e, h, 1); }
SIM_API CUresult cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int f)
{
    (void)f;
    return event_record(e, h, 0);
}
SIM_API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream h, unsigned int f)
{
    (void)f;
    return event_record(e, h, 1);
}

static CUresult check_event(CUevent ev)
{
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && (!ev || ev->magic != MAGIC_EVENT))
        rc = CUDA_ERROR_INVALID_HANDLE;
    return rc;
}

/* Waiting on or querying an event recorded outside a capture is unsafe while one runs. */
static CUresult check_event_wait(CUevent ev)
{
    CUresult rc = check_event(ev);
    if (rc == CUDA_SUCCESS && !ev->captured)
        rc = sim_capture_check();
    return rc;
}

SIM_API CUresult cuEventQuery(CUevent ev)
{
    CUresult rc = check_event_wait(ev);
    if (rc != CUDA_SUCCESS)
        return rc;
    return sim_tl_event_done(ev, 1) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_API CUresult cuEventSynchronize(CUevent ev)
{
    CUresult rc = check_event_wait(ev);
    if (rc == CUDA_SUCCESS) /* spins unless the event was made for blocking waits */
        sim_tl_sync_event(ev, !(ev->flags & CU_EVENT_BLOCKING_SYNC));
    return rc;
}

SIM_API CUresult cuEventDestroy_v2(CUevent ev)
{
    CUresult rc = check_event(ev);
    if (rc == CUDA_SUCCESS) {
        ev->magic = MAGIC_DEAD;
        free(ev);
    }
    return rc;
}

static CUresult elapsed(float *ms, CUevent start, CUevent end)
{
    CUresult rc = check_event(start);
    if (rc == CUDA_SUCCESS)
        rc = check_event(end);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!start->recorded || !end->recorded ||
        ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!sim_tl_event_done(start, 0) || !sim_tl_event_done(end, 0))
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)(end->t_ns - start->t_ns) / 1e6);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuEventElapsedTime(float *ms, CUevent s, CUevent e) { return elapsed(ms, s, e); }
SIM_API CUresult cuEventElapsedTime_v2(float *ms, CUevent s, CUevent e) { return elapsed(ms, s, e); }
