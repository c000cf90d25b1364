/* Stream capture into graphs, and graph launch: a launched graph replays its captured
 * kernels in order on the stream. Only kernel launches are captured; copies and sets on a
 * capturing stream run immediately (the simulator's kernels never touch memory). */
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

static struct CUgraph_st *new_graph(void)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (g)
        g->magic = MAGIC_GRAPH;
    return g;
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
    s->capture = new_graph();
    return s->capture ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult end_capture(CUstream h, CUgraph *phGraph, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    if (!s->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    *phGraph = s->capture;
    s->capture = NULL;
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
    *status = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
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

SIM_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *phGraph = new_graph();
    return *phGraph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuGraphDestroy(CUgraph g)
{
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && (!g || g->magic != MAGIC_GRAPH))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        g->magic = MAGIC_DEAD;
        free(g->nodes);
        free(g);
    }
    return rc;
}

SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph g,
                                             unsigned long long flags)
{
    (void)flags;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraphExec || !g || g->magic != MAGIC_GRAPH)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    size_t bytes = (size_t)g->count * sizeof *g->nodes;
    if (!e || (bytes && !(e->nodes = malloc(bytes)))) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (bytes)
        memcpy(e->nodes, g->nodes, bytes);
    e->count = g->count;
    e->magic = MAGIC_EXEC;
    *phGraphExec = e;
    return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec e, CUstream h, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!e || e->magic != MAGIC_EXEC)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < e->count && rc == CUDA_SUCCESS; i++)
        rc = sim_stream_enqueue(s, e->nodes[i].duration_ns);
    return rc;
}

SIM_API CUresult cuGraphLaunch(CUgraphExec e, CUstream h) { return graph_launch(e, h, 0); }
SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream h) { return graph_launch(e, h, 1); }

SIM_API CUresult cuGraphExecDestroy(CUgraphExec e)
{
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && (!e || e->magic != MAGIC_EXEC))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        e->magic = MAGIC_DEAD;
        free(e->nodes);
        free(e);
    }
    return rc;
}
