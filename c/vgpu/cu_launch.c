/* Launches: the only cost added when no compute limit is set is one predictable branch on
 * vgpu_limiter_on; with a limit, the limiter admits the launch (limiter.h). */
#include "limiter.h"

/* Returns the real launch `call`, passed through the limiter when it is on. */
#define LIMITED(call, ...)                                                                     \
    do {                                                                                       \
        if (VGPU_UNLIKELY(vgpu_limiter_on)) {                                                  \
            struct vgpu_launch l_ = {__VA_ARGS__};                                             \
            struct vgpu_ticket t_;                                                             \
            CUresult rc_ = vgpu_limiter_admit(&l_, &t_);                                       \
            if (rc_ == CUDA_SUCCESS) {                                                         \
                rc_ = call;                                                                    \
                vgpu_limiter_done(&l_, &t_, rc_);                                              \
            }                                                                                  \
            return rc_;                                                                        \
        }                                                                                      \
        return call;                                                                           \
    } while (0)

#define KERNEL_PARAMS                                                                          \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,          \
        unsigned int by, unsigned int bz, unsigned int shared, CUstream s

CUresult hook_cuLaunchKernel(KERNEL_PARAMS, void **params, void **extra)
{
    LIMITED(CALL_CU(cuLaunchKernel, f, gx, gy, gz, bx, by, bz, shared, s, params, extra),
            LAUNCH_KERNEL, 0, s, {gx, gy, gz}, {bx, by, bz}, f);
}

CUresult hook_cuLaunchKernel_ptsz(KERNEL_PARAMS, void **params, void **extra)
{
    LIMITED(CALL_CU(cuLaunchKernel_ptsz, f, gx, gy, gz, bx, by, bz, shared, s, params, extra),
            LAUNCH_KERNEL, 1, s, {gx, gy, gz}, {bx, by, bz}, f);
}

CUresult hook_cuLaunchCooperativeKernel(KERNEL_PARAMS, void **params)
{
    LIMITED(CALL_CU(cuLaunchCooperativeKernel, f, gx, gy, gz, bx, by, bz, shared, s, params),
            LAUNCH_COOPERATIVE, 0, s, {gx, gy, gz}, {bx, by, bz}, f);
}

CUresult hook_cuLaunchCooperativeKernel_ptsz(KERNEL_PARAMS, void **params)
{
    LIMITED(CALL_CU(cuLaunchCooperativeKernel_ptsz, f, gx, gy, gz, bx, by, bz, shared, s, params),
            LAUNCH_COOPERATIVE, 1, s, {gx, gy, gz}, {bx, by, bz}, f);
}

/* The launch description of a cuLaunchKernelEx configuration (NULL: the driver refuses it). */
#define EX_LAUNCH(c, f, per_thread)                                                            \
    LAUNCH_KERNEL_EX, per_thread, (c) ? (c)->hStream : NULL,                                   \
        {(c) ? (c)->gridDimX : 0, (c) ? (c)->gridDimY : 0, (c) ? (c)->gridDimZ : 0},           \
        {(c) ? (c)->blockDimX : 0, (c) ? (c)->blockDimY : 0, (c) ? (c)->blockDimZ : 0}, f

CUresult hook_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                               void **extra)
{
    LIMITED(CALL_CU(cuLaunchKernelEx, config, f, params, extra), EX_LAUNCH(config, f, 0));
}

CUresult hook_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                    void **extra)
{
    LIMITED(CALL_CU(cuLaunchKernelEx_ptsz, config, f, params, extra), EX_LAUNCH(config, f, 1));
}

/* A launched graph may have taken graph-pool memory (its memory nodes): count it. */
static CUresult graph_launched(CUresult rc, CUstream s)
{
    if (rc == CUDA_SUCCESS)
        vgpu_graph_memory_settle(s);
    return rc;
}

CUresult hook_cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    LIMITED(graph_launched(CALL_CU(cuGraphLaunch, exec, s), s), LAUNCH_GRAPH, 0, s, {0, 0, 0}, {0, 0, 0}, exec);
}

CUresult hook_cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s)
{
    LIMITED(graph_launched(CALL_CU(cuGraphLaunch_ptsz, exec, s), s), LAUNCH_GRAPH, 1, s, {0, 0, 0}, {0, 0, 0}, exec);
}
