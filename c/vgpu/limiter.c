/* Stub of the compute limiter (issue 4): it records whether a limit is configured, so the
 * launch hooks take their limiter branch, and admits every launch. */
#include "limiter.h"

int vgpu_limiter_on;

void vgpu_limiter_init(const struct vgpu_config *cfg)
{
    for (int i = 0; i < VGPU_MAX_DEVICES; i++)
        if (cfg->sm_limit[i] > 0 && cfg->sm_limit[i] < 100 && cfg->policy != VGPU_POLICY_DISABLE)
            vgpu_limiter_on = 1;
}

CUresult vgpu_limiter_admit(const struct vgpu_launch *launch)
{
    (void)launch;
    return CUDA_SUCCESS;
}
