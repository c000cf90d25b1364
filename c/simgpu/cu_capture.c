/* Stream capture and its three modes, as the driver enforces them.
 *
 * While a stream captures, "potentially unsafe" calls (synchronous allocation and free,
 * synchronisation of the legacy stream or the context, queries of events recorded outside the
 * capture, memory-pool attribute reads) are prohibited, depending on the calling thread's
 * interaction mode (cuThreadExchangeStreamCaptureMode; GLOBAL by default):
 *   GLOBAL        prohibited while this thread captures in a non-relaxed mode, or while any
 *                 other thread of the process captures in GLOBAL mode;
 *   THREAD_LOCAL  prohibited while this thread captures in a non-relaxed mode;
 *   RELAXED       never prohibited.
 * A prohibited call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the
 * captures that forbade it; their cuStreamEndCapture then fails with
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and returns no graph. */
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

#define MAX_CAPTURES 256

static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUgraph_st *active[MAX_CAPTURES]; /* captures in progress, any thread */
static int active_count;                        /* read without the lock on the fast path */
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* Whether capture `g` forbids an unsafe call by this thread. */
static int forbids(const struct CUgraph_st *g, pthread_t self)
{
    int mine = pthread_equal(g->thread, self);
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return 0;
    if (mine)
        return g->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    return thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && g->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
}

CUresult sim_capture_check(void)
{
    if (!__atomic_load_n(&active_count, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    pthread_t self = pthread_self();
    int prohibited = 0;
    pthread_mutex_lock(&capture_lock);
    for (int i = 0; i < MAX_CAPTURES; i++) {
        if (active[i] && forbids(active[i], self)) {
            active[i]->invalidated = 1;
            prohibited = 1;
        }
    }
    pthread_mutex_unlock(&capture_lock);
    return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

static int track(struct CUgraph_st *g, int add)
{
    int done = 0;
    pthread_mutex_lock(&capture_lock);
    for (int i = 0; i < MAX_CAPTURES && !done; i++) {
        if (add ? active[i] == NULL : active[i] == g) {
            active[i] = add ? g : NULL;
            done = 1;
        }
    }
    if (done)
        __atomic_add_fetch(&active_count, add ? 1 : -1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&capture_lock);
    return done ? 0 : -1;
}

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (s == &s->ctx->null_stream) /* the legacy stream cannot be captured */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    struct CUgraph_st *g = sim_new_graph();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    static unsigned long long next_capture = 1;
    g->mode = mode;
    g->thread = pthread_self();
    g->capture_id = __atomic_fetch_add(&next_capture, 1, __ATOMIC_RELAXED);
    if (track(g, 1) < 0) {
        sim_graph_free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->capture = g;
    return CUDA_SUCCESS;
}

static CUresult end_capture(CUstream h, CUgraph *phGraph, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraph_st *g = s->capture;
    if (!g)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (g->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(g->thread, pthread_self()))
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    s->capture = NULL;
    track(g, 0);
    if (__atomic_load_n(&g->invalidated, __ATOMIC_RELAXED)) {
        sim_graph_free(g);
        *phGraph = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *phGraph = g;
    return CUDA_SUCCESS;
}

static CUresult is_capturing(CUstream h, CUstreamCaptureStatus *status, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    const struct CUgraph_st *g = s->capture;
    *status = !g ? CU_STREAM_CAPTURE_STATUS_NONE
                 : g->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                  : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode m)
{
    return begin_capture(h, m, 0);
}
SIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode m)
{
    return begin_capture(h, m, 1);
}
SIM_API CUresult cuStreamEndCapture(CUstream h, CUgraph *g) { return end_capture(h, g, 0); }
SIM_API CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph *g) { return end_capture(h, g, 1); }
SIM_API CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st)
{
    return is_capturing(h, st, 0);
}
SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *st)
{
    return is_capturing(h, st, 1);
}

SIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}
