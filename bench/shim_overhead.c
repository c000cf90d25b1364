/* Driver for bench/shim_overhead.py: the shim's added cost in nanoseconds, without Python.
 *
 *   shim_overhead LIBVGPU PAIRS LAUNCHES ROUNDS
 *       resolves cuMemAlloc_v2 / cuMemFree_v2 / cuLaunchKernel twice in one process: from
 *       libcuda.so.1 (straight to the driver) and from LIBVGPU (through the shim, dlopen()ed
 *       after the real ones were taken), then alternates short timed rounds of each and
 *       prints, in ns per operation (medians over the rounds): "alloc_free_direct
 *       alloc_free_shim launch_direct launch_shim alloc_free_added launch_added".
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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over rounds of column `k` of a rounds x 4 table, minus column `minus` if >= 0. */
static double median_of(const double *t, long rounds, int k, int minus)
{
    double *v = malloc((size_t)rounds * sizeof *v);
    for (long r = 0; r < rounds; r++)
        v[r] = t[r * 4 + k] - (minus >= 0 ? t[r * 4 + minus] : 0);
    qsort(v, (size_t)rounds, sizeof *v, cmp_double);
    double m = v[rounds / 2];
    free(v);
    return m;
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
    /* Short rounds, alternating which side goes first: drift and load from elsewhere hit
     * both sides alike, and the median of the per-round differences ignores outliers. */
    double *t = calloc((size_t)rounds * 4, sizeof *t);
    for (long r = 0; r < rounds; r++) {
        const struct api *first = r % 2 ? &hooked : &direct, *second = r % 2 ? &direct : &hooked;
        double a = time_pairs(first, pairs), b = time_pairs(second, pairs);
        double c = time_launches(first, f, launches), d = time_launches(second, f, launches);
        t[r * 4 + 0] = r % 2 ? b : a;
        t[r * 4 + 1] = r % 2 ? a : b;
        t[r * 4 + 2] = r % 2 ? d : c;
        t[r * 4 + 3] = r % 2 ? c : d;
    }
    double out[6];
    for (int k = 0; k < 4; k++)
        out[k] = median_of(t, rounds, k, -1);
    out[4] = median_of(t, rounds, 1, 0); /* shim - direct, per round */
    out[5] = median_of(t, rounds, 3, 2);
    printf("%.1f %.1f %.1f %.1f %.1f %.1f\n", out[0], out[1], out[2], out[3], out[4], out[5]);
    free(t);
    return 0;
}
