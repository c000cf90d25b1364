/* Launches pass straight through; the only cost added when no compute limit is set is one
 * predictable branch on vgpu_limiter_on (limiter.h says how the limiter plugs in). */
#include "limiter.h"

#define ADMIT(...)                                                                             \
    do {                                                                                       \
        if (VGPU_UNLIKELY(vgpu_limiter_on)) {                                                  \
            CUresult rc_ = vgpu_limiter_admit(&(struct vgpu_launch){__VA_ARGS__});             \
            if (rc_ != CUDA_SUCCESS)                                                           \
                return rc_;                                                                    \
        }                                                                                      \
    } while (0)

#define KERNEL_PARAMS                                                                          \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,          \
        unsigned int by, unsigned int bz, unsigned int shared, CUstream s

CUresult hook_cuLaunchKernel(KERNEL_PARAMS, void **params, void **extra)
{
    ADMIT(LAUNCH_KERNEL, 0, s, {gx, gy, gz}, {bx, by, bz});
    return CALL_CU(cuLaunchKernel, f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

CUresult hook_cuLaunchKernel_ptsz(KERNEL_PARAMS, void **params, void **extra)
{
    ADMIT(LAUNCH_KERNEL, 1, s, {gx, gy, gz}, {bx, by, bz});
    return CALL_CU(cuLaunchKernel_ptsz, f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

CUresult hook_cuLaunchCooperativeKernel(KERNEL_PARAMS, void **params)
{
    ADMIT(LAUNCH_COOPERATIVE, 0, s, {gx, gy, gz}, {bx, by, bz});
    return CALL_CU(cuLaunchCooperativeKernel, f, gx, gy, gz, bx, by, bz, shared, s, params);
}

CUresult hook_cuLaunchCooperativeKernel_ptsz(KERNEL_PARAMS, void **params)
{
    ADMIT(LAUNCH_COOPERATIVE, 1, s, {gx, gy, gz}, {bx, by, bz});
    return CALL_CU(cuLaunchCooperativeKernel_ptsz, f, gx, gy, gz, bx, by, bz, shared, s, params);
}

#define EX_ADMIT(c, per_thread)                                                                \
    ADMIT(LAUNCH_KERNEL_EX, per_thread, (c) ? (c)->hStream : NULL,                             \
          {(c) ? (c)->gridDimX : 0, (c) ? (c)->gridDimY : 0, (c) ? (c)->gridDimZ : 0},         \
          {(c) ? (c)->blockDimX : 0, (c) ? (c)->blockDimY : 0, (c) ? (c)->blockDimZ : 0})

CUresult hook_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                               void **extra)
{
    EX_ADMIT(config, 0);
    return CALL_CU(cuLaunchKernelEx, config, f, params, extra);
}

CUresult hook_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                    void **extra)
{
    EX_ADMIT(config, 1);
    return CALL_CU(cuLaunchKernelEx_ptsz, config, f, params, extra);
}

CUresult hook_cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    ADMIT(LAUNCH_GRAPH, 0, s, {0, 0, 0}, {0, 0, 0});
    return CALL_CU(cuGraphLaunch, exec, s);
}

CUresult hook_cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s)
{
    ADMIT(LAUNCH_GRAPH, 1, s, {0, 0, 0}, {0, 0, 0});
    return CALL_CU(cuGraphLaunch_ptsz, exec, s);
}
