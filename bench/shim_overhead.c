/* Driver for bench/shim_overhead.py: the shim's added cost in nanoseconds, without Python.
 *
 *   shim_overhead PAIRS LAUNCHES ROUNDS LIBVGPU [LIBVGPU...]
 *       resolves cuMemAlloc_v2 / cuMemFree_v2 / cuLaunchKernel / cuMemGetInfo_v2 in one
 *       process from libcuda.so.1 (straight to the driver) and from each LIBVGPU (through a
 *       shim, dlopen()ed after the real ones were taken; e.g. a build before a change and one
 *       after), then rotates short timed rounds of each and prints one line per side (direct
 *       first), in ns per operation (medians over the rounds): "pair launch meminfo
 *       pair_added launch_added meminfo_added" (added: over direct, per round).
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
    fn_t alloc, free, launch, meminfo;
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

/* cuMemGetInfo: through the shim it re-reads the driver's figure for this process (the
 * footprint refresh) every time, so its added cost is the refresh's upper bound. */
static double time_meminfo(const struct api *a, long n)
{
    size_t free_b = 0, total_b = 0;
    double t0 = now_ns();
    for (long i = 0; i < n; i++)
        if (a->meminfo(&free_b, &total_b))
            exit(3);
    return (now_ns() - t0) / n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over rounds of t[r][k] minus t[r][minus] (minus < 0: nothing), `width` columns. */
static double median_of(const double *t, long rounds, int width, int k, int minus)
{
    double *v = malloc((size_t)rounds * sizeof *v);
    for (long r = 0; r < rounds; r++)
        v[r] = t[r * width + k] - (minus >= 0 ? t[r * width + minus] : 0);
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

#define MAX_APIS 4
#define OPS 3 /* alloc+free pair, launch, cuMemGetInfo */

static struct api resolve(void *lib)
{
    return (struct api){must(lib, "cuMemAlloc_v2"), must(lib, "cuMemFree_v2"),
                        must(lib, "cuLaunchKernel"), must(lib, "cuMemGetInfo_v2")};
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "startup") == 0)
        return startup();
    if (argc < 5 || argc - 4 + 1 > MAX_APIS)
        return 2;
    long pairs = atol(argv[1]), launches = atol(argv[2]), rounds = atol(argv[3]);
    int apis = argc - 4 + 1; /* direct, then each shim given */
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda)
        return 2;
    struct api api[MAX_APIS] = {resolve(cuda)};
    int dev = 0;
    void *ctx = NULL, *mod = NULL, *f = NULL;
    for (int k = 1; k < apis; k++) {
        void *shim = dlopen(argv[3 + k], RTLD_NOW | RTLD_LOCAL);
        if (!shim) {
            fprintf(stderr, "%s\n", dlerror());
            return 2;
        }
        api[k] = resolve(shim);
        /* the primary context through each shim: it learns what the context costs */
        if (must(shim, "cuInit")(0) || must(cuda, "cuDeviceGet")(&dev, 0) ||
            must(shim, "cuDevicePrimaryCtxRetain")(&ctx, dev))
            return 4;
    }
    if (must(cuda, "cuCtxSetCurrent")(ctx) || must(cuda, "cuModuleLoadData")(&mod, "x") ||
        must(cuda, "cuModuleGetFunction")(&f, mod, "spin"))
        return 4;
    /* Short rounds, rotating which side goes first: drift and load from elsewhere hit every
     * side alike, and the median of the per-round differences ignores outliers. */
    double *t = calloc((size_t)rounds * apis * OPS, sizeof *t);
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < apis; i++) {
            int k = (int)((r + i) % apis);
            double *row = &t[r * apis * OPS + k * OPS];
            row[0] = time_pairs(&api[k], pairs);
            row[1] = time_launches(&api[k], f, launches);
            row[2] = time_meminfo(&api[k], pairs / 10 + 1);
        }
    }
    /* One line per side: its medians, then its added medians over direct (per round). */
    for (int k = 0; k < apis; k++) {
        for (int op = 0; op < OPS; op++)
            printf("%.1f ", median_of(t, rounds, apis * OPS, k * OPS + op, -1));
        for (int op = 0; op < OPS; op++)
            printf("%.1f ", median_of(t, rounds, apis * OPS, k * OPS + op, op));
        printf("\n");
    }
    free(t);
    return 0;
}
