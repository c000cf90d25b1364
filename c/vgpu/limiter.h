/* The compute limiter's place in the shim (issue 4 fills it in; limiter.c is a stub today).
 *
 * Every launch hook (cu_launch.c: cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel,
 * cuGraphLaunch and their _ptsz variants, whichever route the application used) does
 *
 *     if (VGPU_UNLIKELY(vgpu_limiter_on)) { rc = vgpu_limiter_admit(&launch); ... }
 *
 * before calling the real driver, so the limiter only has to implement the two functions
 * below. Its shared state belongs in the reserved `limiter` bytes of vgpu_device (256 per
 * device) and vgpu_proc (64 per process) in vgpu_shared.h, under the same lock or lock-free.
 */
#ifndef HAMI_VGPU_LIMITER_H
#define HAMI_VGPU_LIMITER_H

#include "vgpu.h"

enum vgpu_launch_kind { LAUNCH_KERNEL, LAUNCH_KERNEL_EX, LAUNCH_COOPERATIVE, LAUNCH_GRAPH };

struct vgpu_launch {
    enum vgpu_launch_kind kind;
    int per_thread;          /* a _ptsz variant: stream 0 means the per-thread stream */
    CUstream stream;
    unsigned int grid[3];    /* blocks (0 for graphs) */
    unsigned int block[3];   /* threads per block (0 for graphs) */
};

/* Non-zero when some device has an SM limit (0 < limit < 100) and the policy allows it. */
extern int vgpu_limiter_on;
/* Called once with the configuration, before any launch. */
void vgpu_limiter_init(const struct vgpu_config *cfg);
/* May wait; returns CUDA_SUCCESS to let the launch go, or an error to return instead. */
CUresult vgpu_limiter_admit(const struct vgpu_launch *launch);

#endif /* HAMI_VGPU_LIMITER_H */
