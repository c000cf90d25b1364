/* Graphs and graph launch: a launched graph replays its captured kernels in order on the
 * stream. Only kernel launches and stream-ordered allocations are captured; copies and sets on
 * a capturing stream run immediately (the simulator's kernels never touch memory).
 *
 * Graph memory: allocations captured into a graph (graph memory nodes) take their memory from
 * a per-device graph pool when the graph is launched, not through cuMemAlloc or a memory pool.
 * The pool keeps what it reserved for later launches until cuDeviceGraphMemTrim;
 * cuDeviceGetGraphMemAttribute reports it. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cu_internal.h"

static pthread_mutex_t graph_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t graph_reserved[SIM_MAX_DEVICES], graph_reserved_high[SIM_MAX_DEVICES];
static uint64_t graph_used[SIM_MAX_DEVICES], graph_used_high[SIM_MAX_DEVICES];

struct CUgraph_st *sim_new_graph(void)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (g)
        g->magic = MAGIC_GRAPH;
    return g;
}

CUresult sim_graph_add_kernel(struct CUgraph_st *g, const struct sim_node *kernel)
{
    if (g->count == g->cap) {
        int cap = g->cap ? g->cap * 2 : 16;
        struct sim_node **nodes = realloc(g->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->nodes = nodes;
        g->cap = cap;
    }
    struct sim_node *n = malloc(sizeof *n);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *n = *kernel;
    n->magic = MAGIC_NODE;
    n->graph = g;
    g->nodes[g->count++] = n;
    return CUDA_SUCCESS;
}

void sim_graph_free(struct CUgraph_st *g)
{
    g->magic = MAGIC_DEAD;
    for (int i = 0; i < g->count; i++) {
        g->nodes[i]->magic = MAGIC_DEAD;
        free(g->nodes[i]);
    }
    free(g->nodes);
    free(g);
}

SIM_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *phGraph = sim_new_graph();
    return *phGraph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuGraphDestroy(CUgraph g)
{
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && (!g || g->magic != MAGIC_GRAPH))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        sim_graph_free(g);
    return rc;
}

static CUresult instantiate(CUgraphExec *phGraphExec, CUgraph g)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraphExec || !g || g->magic != MAGIC_GRAPH)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    size_t bytes = (size_t)g->count * sizeof *e->nodes;
    if (!e || (bytes && !(e->nodes = malloc(bytes)))) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < g->count; i++) {
        e->nodes[i] = *g->nodes[i];
        e->nodes[i].graph = NULL;
        e->nodes[i].origin = g->nodes[i];
    }
    e->count = g->count;
    e->alloc_bytes = g->alloc_bytes;
    e->magic = MAGIC_EXEC;
    *phGraphExec = e;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph g,
                                             unsigned long long flags)
{
    (void)flags;
    return instantiate(phGraphExec, g);
}

/* The first ABI: the error node and log buffer are left alone on success. */
SIM_API CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph g, CUgraphNode *errorNode,
                                    char *logBuffer, size_t bufferSize)
{
    (void)errorNode, (void)logBuffer, (void)bufferSize;
    return instantiate(phGraphExec, g);
}
SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph g, CUgraphNode *errorNode,
                                       char *logBuffer, size_t bufferSize)
{
    (void)errorNode, (void)logBuffer, (void)bufferSize;
    return instantiate(phGraphExec, g);
}

/* A cuMemAllocAsync being captured: address space now, memory at graph launch. */
CUresult sim_capture_alloc(CUdeviceptr *dptr, size_t bytes, struct CUstream_st *s)
{
    uint64_t size = sim_alloc_size(bytes);
    void *mem = sim_map_memory(size);
    struct sim_alloc a = {(uintptr_t)mem, size, 0, s->ctx->dev, ALLOC_GRAPH, NULL, 0, -1};
    if (!mem || sim_alloc_put(&a) < 0) {
        if (mem)
            munmap(mem, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->capture->alloc_bytes += size;
    *dptr = (CUdeviceptr)(uintptr_t)mem;
    return CUDA_SUCCESS;
}


/* A launch's graph memory: the pool grows to the largest need seen, charged to the device. */
static CUresult graph_pool_take(int dev, uint64_t bytes)
{
    if (!bytes)
        return CUDA_SUCCESS;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&graph_pool_lock);
    if (bytes > graph_reserved[dev]) {
        if (sim_charge(dev, bytes - graph_reserved[dev]) == 0)
            graph_reserved[dev] = bytes;
        else
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc == CUDA_SUCCESS) {
        graph_used[dev] = bytes;
        if (bytes > graph_used_high[dev])
            graph_used_high[dev] = bytes;
        if (graph_reserved[dev] > graph_reserved_high[dev])
            graph_reserved_high[dev] = graph_reserved[dev];
    }
    pthread_mutex_unlock(&graph_pool_lock);
    return rc;
}

static CUresult graph_launch(CUgraphExec e, CUstream h, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!e || e->magic != MAGIC_EXEC)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->capture) /* launched into a capture: a child graph, its memory taken later */
        s->capture->alloc_bytes += e->alloc_bytes;
    else if ((rc = graph_pool_take(s->ctx->dev, e->alloc_bytes)) != CUDA_SUCCESS)
        return rc;
    for (int i = 0; i < e->count && rc == CUDA_SUCCESS; i++)
        rc = sim_stream_enqueue(s, &e->nodes[i]);
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

/* The graph pool gives back what it holds: the simulator's graphs have finished their work by
 * the time anyone can call this, so nothing is in use. */
SIM_API CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&graph_pool_lock);
    sim_uncharge(dev, graph_reserved[dev]);
    graph_reserved[dev] = graph_used[dev] = 0;
    pthread_mutex_unlock(&graph_pool_lock);
    return CUDA_SUCCESS;
}

static CUresult graph_mem_attribute(CUdevice dev, CUgraphMem_attribute attr, void *value, int set)
{
    CUresult rc = sim_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t *v = value, *field = NULL;
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: field = set ? NULL : &graph_used[dev]; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: field = set ? NULL : &graph_reserved[dev]; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: field = &graph_used_high[dev]; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: field = &graph_reserved_high[dev]; break;
    }
    if (!field || (set && *v != 0)) /* only the high marks can be set, and only to 0 */
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graph_pool_lock);
    if (set)
        *field = field == &graph_used_high[dev] ? graph_used[dev] : graph_reserved[dev];
    else
        *v = *field;
    pthread_mutex_unlock(&graph_pool_lock);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    return graph_mem_attribute(dev, attr, value, 0);
}

SIM_API CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    return graph_mem_attribute(dev, attr, value, 1);
}
