/* Test harness linked directly against libcuda (-lcuda): the LD_PRELOAD route into the shim.
 *
 *   harness direct BYTES          one allocation of BYTES, then report what the driver says
 *   harness hammer THREADS ITERS BYTES
 *                                 THREADS threads allocate and free BYTES ITERS times each,
 *                                 holding each allocation briefly; prints successes/refusals
 *   harness hammer-async THREADS ITERS BYTES
 *                                 the same with cuMemAllocAsync / cuMemFreeAsync on a stream
 *                                 per thread, synchronising after each free
 *   harness startup               cuInit only (maps the shared file, claims a slot)
 * Output is one JSON line on stdout.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hami_cuda.h"

static CUcontext ctx;
static size_t bytes;
static long iterations;
static int stream_ordered;

static int fail(const char *what, CUresult rc)
{
    printf("{\"error\": \"%s\", \"rc\": %d}\n", what, (int)rc);
    return 1;
}

static void *hammer_thread(void *arg)
{
    long *counts = arg; /* [0] successes, [1] refusals, [2] other errors */
    cuCtxSetCurrent(ctx);
    struct timespec hold = {0, 20000};
    CUstream s = NULL;
    if (stream_ordered && cuStreamCreate(&s, 0) != CUDA_SUCCESS)
        counts[2]++;
    for (long i = 0; i < iterations; i++) {
        CUdeviceptr p = 0;
        CUresult rc = stream_ordered ? cuMemAllocAsync(&p, bytes, s) : cuMemAlloc_v2(&p, bytes);
        if (rc == CUDA_SUCCESS) {
            counts[0]++;
            nanosleep(&hold, NULL);
            rc = stream_ordered ? cuMemFreeAsync(p, s) : cuMemFree_v2(p);
            if (rc != CUDA_SUCCESS || (stream_ordered && cuStreamSynchronize(s) != CUDA_SUCCESS))
                counts[2]++;
        } else {
            counts[rc == CUDA_ERROR_OUT_OF_MEMORY ? 1 : 2]++;
        }
    }
    return NULL;
}

static int hammer(int threads)
{
    pthread_t tids[64];
    long counts[64][3];
    memset(counts, 0, sizeof counts);
    threads = threads > 64 ? 64 : threads;
    for (int t = 0; t < threads; t++)
        pthread_create(&tids[t], NULL, hammer_thread, counts[t]);
    long total[3] = {0, 0, 0};
    for (int t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
        for (int k = 0; k < 3; k++)
            total[k] += counts[t][k];
    }
    printf("{\"ok\": %ld, \"refused\": %ld, \"errors\": %ld}\n", total[0], total[1], total[2]);
    return 0;
}

static int direct(void)
{
    CUdeviceptr p = 0;
    size_t free_b = 0, total_b = 0, dev_total = 0;
    CUresult alloc = cuMemAlloc_v2(&p, bytes);
    CUresult info = cuMemGetInfo_v2(&free_b, &total_b);
    CUresult tot = cuDeviceTotalMem_v2(&dev_total, 0);
    if (alloc == CUDA_SUCCESS)
        cuMemFree_v2(p);
    printf("{\"alloc\": %d, \"info\": %d, \"free\": %zu, \"total\": %zu, \"device_total\": %zu, "
           "\"total_rc\": %d}\n", (int)alloc, (int)info, free_b, total_b, dev_total, (int)tot);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return fail("usage", CUDA_ERROR_INVALID_VALUE);
    CUresult rc = cuInit(0);
    if (rc != CUDA_SUCCESS)
        return fail("cuInit", rc);
    if (strcmp(argv[1], "startup") == 0) {
        printf("{\"started\": true}\n");
        return 0;
    }
    CUdevice dev = 0;
    if ((rc = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS)
        return fail("cuDevicePrimaryCtxRetain", rc);
    cuCtxSetCurrent(ctx);
    if (strcmp(argv[1], "direct") == 0 && argc == 3) {
        bytes = strtoull(argv[2], NULL, 10);
        return direct();
    }
    stream_ordered = strcmp(argv[1], "hammer-async") == 0;
    if ((stream_ordered || strcmp(argv[1], "hammer") == 0) && argc == 5) {
        iterations = atol(argv[3]);
        bytes = strtoull(argv[4], NULL, 10);
        return hammer(atoi(argv[2]));
    }
    return fail("usage", CUDA_ERROR_INVALID_VALUE);
}
