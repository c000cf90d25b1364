/* Driver for bench/shim_overhead.py: the shim's added cost in nanoseconds, without Python.
 *
 *   shim_overhead LIBVGPU PAIRS LAUNCHES ROUNDS
 *       resolves cuMemAlloc_v2 / cuMemFree_v2 / cuLaunchKernel twice in one process: from
 *       libcuda.so.1 (straight to the driver) and from LIBVGPU (through the shim, dlopen()ed
 *       after the real ones were taken), then alternates timed rounds of each and prints
 *       "alloc_free_direct alloc_free_shim launch_direct launch_shim" (ns per operation, the
 *       best round of each).
 *   shim_overhead startup
 *       cuInit only; prints the nanoseconds it took (run with LD_PRELOAD=libvgpu.so to time
 *       the shim's start-up: mapping the shared file and claiming a process slot).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*fn_t)();

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static fn_t must(void *lib, const char *name)
{
    fn_t f = (fn_t)dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "missing %s\n", name);
        exit(2);
    }
    return f;
}

struct api {
    fn_t alloc, free, launch;
};

static double time_pairs(const struct api *a, long n)
{
    unsigned long long p = 0;
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        if (a->alloc(&p, (size_t)4096) || a->free(p))
            exit(3);
    }
    return (now_ns() - t0) / n;
}

static double time_launches(const struct api *a, void *f, long n)
{
    uint64_t ns = 0;
    void *params[] = {&ns};
    double t0 = now_ns();
    for (long i = 0; i < n; i++)
        a->launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
    return (now_ns() - t0) / n;
}

static int startup(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda)
        return 2;
    double t0 = now_ns();
    int rc = must(cuda, "cuInit")(0);
    printf("%.0f\n", now_ns() - t0);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "startup") == 0)
        return startup();
    if (argc != 5)
        return 2;
    long pairs = atol(argv[2]), launches = atol(argv[3]), rounds = atol(argv[4]);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda)
        return 2;
    struct api direct = {must(cuda, "cuMemAlloc_v2"), must(cuda, "cuMemFree_v2"),
                         must(cuda, "cuLaunchKernel")};
    void *shim = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!shim) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    struct api hooked = {must(shim, "cuMemAlloc_v2"), must(shim, "cuMemFree_v2"),
                         must(shim, "cuLaunchKernel")};
    int dev = 0;
    void *ctx = NULL, *mod = NULL, *f = NULL;
    if (must(shim, "cuInit")(0) || must(cuda, "cuDeviceGet")(&dev, 0) ||
        must(cuda, "cuDevicePrimaryCtxRetain")(&ctx, dev) || must(cuda, "cuCtxSetCurrent")(ctx) ||
        must(cuda, "cuModuleLoadData")(&mod, "x") ||
        must(cuda, "cuModuleGetFunction")(&f, mod, "spin"))
        return 4;
    double best[4] = {1e18, 1e18, 1e18, 1e18};
    for (long r = 0; r < rounds; r++) {
        double t[4] = {time_pairs(&direct, pairs), time_pairs(&hooked, pairs),
                       time_launches(&direct, f, launches), time_launches(&hooked, f, launches)};
        for (int k = 0; k < 4; k++)
            best[k] = t[k] < best[k] ? t[k] : best[k];
    }
    printf("%.1f %.1f %.1f %.1f\n", best[0], best[1], best[2], best[3]);
    return 0;
}
