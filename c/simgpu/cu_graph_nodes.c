/* The nodes of graphs (captured kernels) as handles: listed, typed, read, and a kernel node of
 * an executable graph updated in place (cuBLAS patches the kernels of graphs it captured). */
#include <string.h>

#include "cu_internal.h"

static CUresult graph_of(CUgraph g)
{
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && (!g || g->magic != MAGIC_GRAPH))
        rc = CUDA_ERROR_INVALID_VALUE;
    return rc;
}

static CUresult node_of(CUgraphNode h, struct sim_node **out)
{
    struct sim_node *n = (struct sim_node *)h;
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && (!n || n->magic != MAGIC_NODE || !n->graph))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *out = n;
    return rc;
}

/* Captured kernels run in capture order: each depends on the one before. */
static CUresult list(CUgraph g, CUgraphNode *nodes, size_t *count, int roots)
{
    CUresult rc = graph_of(g);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    size_t have = roots ? (g->count > 0) : (size_t)g->count;
    if (nodes)
        for (size_t i = 0; i < have && i < *count; i++)
            nodes[i] = (CUgraphNode)g->nodes[i];
    *count = have;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    return list(hGraph, nodes, numNodes, 0);
}

SIM_API CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
    return list(hGraph, rootNodes, numRootNodes, 1);
}

SIM_API CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    struct sim_node *n = NULL;
    CUresult rc = node_of(hNode, &n);
    if (rc == CUDA_SUCCESS && !type)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *type = CU_GRAPH_NODE_TYPE_KERNEL;
    return rc;
}

/* The launch a node records; its arguments are not kept (kernelParams reads NULL). */
static CUresult kernel_params(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *p, int v2)
{
    struct sim_node *n = NULL;
    CUresult rc = node_of(hNode, &n);
    if (rc == CUDA_SUCCESS && (!p || !n->func))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    CUDA_KERNEL_NODE_PARAMS_v1 v = {n->func, n->grid[0], n->grid[1], n->grid[2], n->block[0],
                                    n->block[1], n->block[2], n->shmem, NULL, NULL};
    memcpy(p, &v, sizeof v);
    if (v2) {
        p->kern = NULL;
        p->ctx = NULL;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    return kernel_params(hNode, (CUDA_KERNEL_NODE_PARAMS_v2 *)p, 0);
}

SIM_API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    return kernel_params(hNode, p, 1);
}

/* The executable graph's copy of `hNode` takes the new launch; the graph itself is unchanged. */
static CUresult exec_set(CUgraphExec e, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!e || e->magic != MAGIC_EXEC || !p)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < e->count; i++) {
        struct sim_node *n = &e->nodes[i];
        if (n->origin != (const struct sim_node *)hNode)
            continue;
        const unsigned int grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
        const unsigned int block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
        struct sim_node fresh;
        struct CUctx_st *c = NULL;
        int dev = sim_require_ctx(&c) == CUDA_SUCCESS ? c->dev : 0;
        rc = sim_kernel_node(&fresh, p->func, grid, block, p->sharedMemBytes, dev,
                             p->kernelParams, p->extra);
        if (rc == CUDA_SUCCESS) {
            fresh.origin = n->origin;
            *n = fresh;
        }
        return rc;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode hNode,
                                                const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    return exec_set(e, hNode, p);
}

SIM_API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec e, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    return exec_set(e, hNode, (const CUDA_KERNEL_NODE_PARAMS_v1 *)p);
}

static CUresult upload(CUgraphExec e, CUstream h, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc == CUDA_SUCCESS && (!e || e->magic != MAGIC_EXEC))
        rc = CUDA_ERROR_INVALID_VALUE;
    return rc; /* nothing to upload: the simulated device holds no code */
}

SIM_API CUresult cuGraphUpload(CUgraphExec e, CUstream h) { return upload(e, h, 0); }
SIM_API CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream h) { return upload(e, h, 1); }
