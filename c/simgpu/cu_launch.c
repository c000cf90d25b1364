/* Kernel launches: the simulator's test kernel `spin` runs for the time its argument says;
 * every other kernel (real CUDA code, which the simulator never executes) takes a time that
 * grows with its grid: waves of blocks over the device's SMs, each wave HAMI_SIM_WAVE_NS. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cu_internal.h"
#include "image.h"

/* The spin kernel's one parameter: nanoseconds, from kernelParams[0] or a packed buffer. */
static CUresult spin_ns(void **params, void **extra, uint64_t *ns)
{
    if (params && params[0]) {
        memcpy(ns, params[0], sizeof *ns);
        return CUDA_SUCCESS;
    }
    for (int i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER && extra[i + 1]) {
            memcpy(ns, extra[i + 1], sizeof *ns);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* How long one wave of a real kernel's blocks takes (HAMI_SIM_WAVE_NS, default 10 us). */
static int64_t wave_ns(void)
{
    static int64_t ns;
    if (!ns) {
        const char *text = getenv("HAMI_SIM_WAVE_NS");
        long long v = text ? atoll(text) : 0;
        __atomic_store_n(&ns, v > 0 ? v : 10000, __ATOMIC_RELAXED);
    }
    return ns;
}

/* Blocks of a kernel resident on one SM at once: threads, registers and shared memory. */
static uint64_t blocks_per_sm(const struct CUfunc_st *f, uint64_t threads, unsigned int shmem)
{
    uint64_t warps = (threads + 31) / 32, by_threads = 2048 / (warps * 32), n = 32;
    if (by_threads < n)
        n = by_threads;
    uint32_t regs = f->info->regs;
    if (regs) {
        uint64_t per_warp = (regs * 32 + 255) / 256 * 256, by_regs = 65536 / (per_warp * warps);
        if (by_regs < n)
            n = by_regs;
    }
    uint64_t smem = f->info->shared_bytes + (uint64_t)shmem;
    if (smem && 167936 / smem < n)
        n = 167936 / smem;
    return n ? n : 1;
}

/* Refuses what a real driver refuses: a block larger than the kernel allows, or more dynamic
 * shared memory than it was given. */
static CUresult check_block(const struct CUfunc_st *f, uint64_t threads, unsigned int shmem)
{
    if (threads == 0 || threads > f->info->max_threads)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f->spin && shmem > (unsigned int)f->max_dynamic_shared)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* A kernel's device time. `spin` takes ns * ceil(blocks / SMs) (PyTorch's sleep kernel the
 * same with its cycles at the device's clock); any other kernel runs
 * ceil(blocks / (SMs x resident blocks)) waves of HAMI_SIM_WAVE_NS. */
static CUresult cost(const struct CUfunc_st *f, uint64_t blocks, uint64_t threads,
                     unsigned int shmem, uint64_t sms, int clock_khz, void **params,
                     void **extra, uint64_t *ns_out)
{
    uint64_t ns = 0, waves;
    if (f->spin) {
        if (spin_ns(params, extra, &ns) != CUDA_SUCCESS)
            return CUDA_ERROR_INVALID_VALUE;
        if (f->spin == SIM_SPIN_CYCLES) /* clock cycles at the device's clock (kHz) */
            ns = (int64_t)ns <= 0 ? 0 : (uint64_t)((double)(int64_t)ns * 1e6 / clock_khz);
        waves = (blocks + sms - 1) / sms;
    } else {
        uint64_t per_wave = sms * blocks_per_sm(f, threads, shmem);
        waves = (blocks + per_wave - 1) / per_wave;
        ns = (uint64_t)wave_ns();
    }
    if (ns > (uint64_t)INT64_MAX / waves)
        return CUDA_ERROR_INVALID_VALUE;
    *ns_out = ns * waves;
    return CUDA_SUCCESS;
}

CUresult sim_kernel_node(struct sim_node *out, CUfunction f, const unsigned int grid[3],
                         const unsigned int block[3], unsigned int shmem, int dev, void **params,
                         void **extra)
{
    if (!f || f->magic != MAGIC_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t blocks = (uint64_t)grid[0] * grid[1] * grid[2];
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2], ns = 0;
    CUresult rc = check_block(f, threads, shmem);
    if (blocks == 0 || rc != CUDA_SUCCESS) {
        sim_driver_log("%s: a launch of %llu blocks of %llu threads with %u bytes of dynamic "
                       "shared memory exceeds what the kernel allows (%u threads, %d bytes)",
                       f->info->name, (unsigned long long)blocks, (unsigned long long)threads,
                       shmem, f->info->max_threads, f->max_dynamic_shared);
        return CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t sms = sim_device(dev)->sms;
    int clock_khz = sim_device_attribute(sim_device(dev), CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    if ((rc = cost(f, blocks, threads, shmem, sms, clock_khz, params, extra, &ns)) !=
        CUDA_SUCCESS)
        return rc;
    *out = (struct sim_node){MAGIC_NODE, NULL, NULL, (int64_t)ns, f, {grid[0], grid[1], grid[2]},
                             {block[0], block[1], block[2]}, shmem};
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, const unsigned int grid[3], const unsigned int block[3],
                       unsigned int shmem, CUstream h, int pt, void **params, void **extra)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_node node;
    if ((rc = sim_kernel_node(&node, f, grid, block, shmem, s->ctx->dev, params, extra)) !=
        CUDA_SUCCESS)
        return rc;
    if ((rc = sim_ctx_kernels_used(s->ctx)) != CUDA_SUCCESS)
        return rc;
    /* Blocks take SMs while they run: a kernel narrower than the device leaves room beside
     * it for kernels of the context's other streams. */
    return sim_stream_enqueue(s, &node);
}

#define LAUNCH_ARGS                                                                           \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,        \
        unsigned int by, unsigned int bz, unsigned int shmem, CUstream h, void **params
#define GRID_BLOCK                                                                            \
    const unsigned int grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz}

SIM_API CUresult cuLaunchKernel(LAUNCH_ARGS, void **extra)
{
    GRID_BLOCK;
    return launch(f, grid, block, shmem, h, 0, params, extra);
}
SIM_API CUresult cuLaunchKernel_ptsz(LAUNCH_ARGS, void **extra)
{
    GRID_BLOCK;
    return launch(f, grid, block, shmem, h, 1, params, extra);
}
SIM_API CUresult cuLaunchCooperativeKernel(LAUNCH_ARGS)
{
    GRID_BLOCK;
    return launch(f, grid, block, shmem, h, 0, params, NULL);
}
SIM_API CUresult cuLaunchCooperativeKernel_ptsz(LAUNCH_ARGS)
{
    GRID_BLOCK;
    return launch(f, grid, block, shmem, h, 1, params, NULL);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra,
                          int pt)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned int grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
    const unsigned int block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
    return launch(f, grid, block, c->sharedMemBytes, c->hStream, pt, params, extra);
}

SIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                  void **extra)
{
    return launch_ex(config, f, params, extra, 0);
}
SIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                       void **extra)
{
    return launch_ex(config, f, params, extra, 1);
}
