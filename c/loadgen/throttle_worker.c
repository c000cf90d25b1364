/* Load for the compute limiter's benchmark and tests (bench/throttle_accuracy.py,
 * tests/shim/test_compute_*.py): a C program linked with -lcuda against the simulated driver
 * and run under the shim, so that Python's call overhead does not shape the load.
 *
 *   throttle_worker MODE SECONDS [DEVICE [THREADS]]
 *
 *   batch    batches of 20 kernels of 100 us on a stream, three batches in flight
 *   long     kernels of 20 ms, three in flight
 *   sync     one kernel of 4 ms, then cuStreamSynchronize, again and again
 *   graph    a captured graph of 10 kernels of 100 us, launched with three in flight
 *   routes   batches of 8 kernels of 100 us, each batch through the next launch entry point:
 *            cuLaunchKernel, cuLaunchKernel_ptsz, cuLaunchKernelEx, cuLaunchKernelEx_ptsz,
 *            cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz, then a graph of 8
 *            through cuGraphLaunch and cuGraphLaunch_ptsz
 *   threads  THREADS threads (default 4), each with its own stream, batches of 10 x 100 us
 *   mixed    one signature whose cost varies 50x: batches of 19 kernels of 100 us and one of
 *            5 ms, all with the same grid and block
 *   grow     batches of 10 kernels whose cost grows over the run: 100 us + 400 us per second
 *   persistent  one block per SM, each kernel looping 2 to 20 ms (its work queue's length)
 *   shapes   batches of 20 kernels of 50 us, each with a block shape not used for the last
 *            16,384 launches (more distinct signatures than the limiter's cost table holds)
 *   tiny     one kernel of 20 us, then polling cuStreamQuery until it is done, again and again
 *
 * The context and the events are made for blocking waits (CU_CTX_SCHED_BLOCKING_SYNC,
 * CU_EVENT_BLOCKING_SYNC), so that the load does not spin the CPUs of the machine it runs on.
 * Prints "ready" once set up (context, module, stream, graph), works for SECONDS or until
 * SIGTERM, then prints one JSON line: kernels launched and their device time in ns.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hami_cuda.h"

#define US 1000ULL
#define MS 1000000ULL

struct job {
    CUcontext ctx;
    int sms;
    CUfunction f;
    const char *mode;
    long kernels;
    uint64_t work_ns;
};

static volatile sig_atomic_t stopping;
static double deadline, started;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static int over(void) { return stopping || now_s() >= deadline; }

static void on_term(int sig)
{
    (void)sig;
    stopping = 1;
}

static void must(CUresult rc, const char *what)
{
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "throttle_worker: %s failed: %d\n", what, (int)rc);
        exit(3);
    }
}

/* The shape of a launch: blocks (grid x) and threads per block (x, y). */
struct shape {
    unsigned grid, bx, by;
};
static const struct shape one = {1, 1, 1};

/* One spin kernel of `ns` through launch entry point `route` (0..5, see the header). */
static CUresult spin_shaped(CUfunction f, CUstream s, uint64_t ns, int route, struct shape h)
{
    void *params[] = {&ns};
    CUlaunchConfig c = {h.grid, 1, 1, h.bx, h.by, 1, 0, s, NULL, 0};
    if (h.grid != 1 || h.bx != 1 || h.by != 1)
        return cuLaunchKernel(f, h.grid, 1, 1, h.bx, h.by, 1, 0, s, params, NULL);
    switch (route) {
    case 1: return cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
    case 2: return cuLaunchKernelEx(&c, f, params, NULL);
    case 3: return cuLaunchKernelEx_ptsz(&c, f, params, NULL);
    case 4: return cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params);
    case 5: return cuLaunchCooperativeKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, s, params);
    default: return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
    }
}

static CUresult spin(CUfunction f, CUstream s, uint64_t ns, int route)
{
    return spin_shaped(f, s, ns, route, one);
}

static CUgraphExec capture(CUfunction f, CUstream s, int kernels, uint64_t ns)
{
    CUgraph g;
    CUgraphExec exec;
    must(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    for (int i = 0; i < kernels; i++)
        must(spin(f, s, ns, 0), "a captured launch");
    must(cuStreamEndCapture(s, &g), "cuStreamEndCapture");
    must(cuGraphInstantiateWithFlags(&exec, g, 0), "cuGraphInstantiate");
    return exec;
}

/* One unit of work of a mode (unit k); returns the kernels it queued. */
struct unit {
    CUfunction f;
    CUstream s;
    CUgraphExec graph;
    int kernels;
    uint64_t ns;
    int rotate; /* routes: the entry point changes with every unit */
    int kind;   /* how kernel i of unit k differs from the others (enum below) */
    int sms;
};
enum { SAME, MIXED, GROW, PERSISTENT, SHAPES };

/* Kernel i of unit k: its duration and its shape. */
static uint64_t kernel_ns(const struct unit *u, long k, int i, struct shape *h)
{
    *h = one;
    switch (u->kind) {
    case MIXED: return i == u->kernels - 1 ? 50 * u->ns : u->ns;
    case GROW: return u->ns + (uint64_t)((now_s() - started) * 400 * US);
    case PERSISTENT:
        h->grid = (unsigned)u->sms;
        return (2 + (uint64_t)((k * 7919) % 19)) * MS;
    case SHAPES: {
        /* 4,096 block shapes of at most 1,024 threads (a real GPU refuses larger blocks)
         * times 4 grid sizes, all within one wave of blocks: 16,384 signatures */
        unsigned n = (unsigned)((k * u->kernels + i) % 16384), pair = n % 4096, y = 1;
        while (pair >= 1024 / y)
            pair -= 1024 / y++;
        h->bx = 1 + pair;
        h->by = y;
        h->grid = 1 + n / 4096;
        return u->ns;
    }
    default: return u->ns;
    }
}

static int submit(const struct unit *u, long k, uint64_t *work)
{
    int route = u->rotate ? (int)(k % 8) : 0;
    if (u->graph && (!u->rotate || route >= 6)) {
        must(route == 7 ? cuGraphLaunch_ptsz(u->graph, u->s) : cuGraphLaunch(u->graph, u->s),
             "cuGraphLaunch");
        *work += (uint64_t)u->kernels * u->ns;
        return u->kernels;
    }
    for (int i = 0; i < u->kernels; i++) {
        struct shape h;
        uint64_t ns = kernel_ns(u, k, i, &h);
        must(spin_shaped(u->f, u->s, ns, route, h), "a launch");
        *work += ns;
    }
    return u->kernels;
}

/* Submits units with DEPTH in flight (after queueing unit k, waits for unit k - DEPTH + 1),
 * so the device has work queued even when this process wakes late on a busy machine. */
#define DEPTH 3
static void pipeline(struct job *job, const struct unit *u)
{
    CUevent ev[DEPTH];
    for (int i = 0; i < DEPTH; i++)
        must(cuEventCreate(&ev[i], CU_EVENT_BLOCKING_SYNC), "cuEventCreate");
    for (long k = 0; !over(); k++) {
        job->kernels += submit(u, k, &job->work_ns);
        must(cuEventRecord(ev[k % DEPTH], u->s), "cuEventRecord");
        if (k >= DEPTH - 1)
            must(cuEventSynchronize(ev[(k + 1) % DEPTH]), "cuEventSynchronize");
    }
    for (int i = 0; i < DEPTH; i++)
        cuEventSynchronize(ev[i]);
}

static void *run(void *arg)
{
    struct job *job = arg;
    struct unit u = {job->f, NULL, NULL, 20, 100 * US, 0, SAME, job->sms};
    must(cuCtxSetCurrent(job->ctx), "cuCtxSetCurrent");
    must(cuStreamCreate(&u.s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    int tiny = strcmp(job->mode, "tiny") == 0;
    if (tiny || strcmp(job->mode, "sync") == 0) {
        uint64_t ns = tiny ? 20 * US : 4 * MS;
        while (!over()) {
            must(spin(job->f, u.s, ns, 0), "a launch");
            if (tiny) { /* polls, as a spinning synchronize does: 20 us is below a sleep */
                CUresult q;
                while ((q = cuStreamQuery(u.s)) == CUDA_ERROR_NOT_READY)
                    sched_yield(); /* as the driver's spinning waits do */
                must(q, "cuStreamQuery");
            } else {
                must(cuStreamSynchronize(u.s), "cuStreamSynchronize");
            }
            job->kernels++;
            job->work_ns += ns;
        }
        return NULL;
    }
    if (strcmp(job->mode, "long") == 0)
        u.kernels = 1, u.ns = 20 * MS;
    else if (strcmp(job->mode, "threads") == 0)
        u.kernels = 10;
    else if (strcmp(job->mode, "graph") == 0)
        u.kernels = 10, u.graph = capture(job->f, u.s, 10, u.ns);
    else if (strcmp(job->mode, "routes") == 0)
        u.kernels = 8, u.rotate = 1, u.graph = capture(job->f, u.s, 8, u.ns);
    else if (strcmp(job->mode, "mixed") == 0)
        u.kind = MIXED;
    else if (strcmp(job->mode, "grow") == 0)
        u.kind = GROW, u.kernels = 10;
    else if (strcmp(job->mode, "persistent") == 0)
        u.kind = PERSISTENT, u.kernels = 1;
    else if (strcmp(job->mode, "shapes") == 0)
        u.kind = SHAPES, u.ns = 50 * US;
    else if (strcmp(job->mode, "batch") != 0) {
        fprintf(stderr, "throttle_worker: unknown mode %s\n", job->mode);
        exit(2);
    }
    pipeline(job, &u);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: throttle_worker MODE SECONDS [DEVICE [THREADS]]\n");
        return 2;
    }
    int device = argc > 3 ? atoi(argv[3]) : 0, threads = argc > 4 ? atoi(argv[4]) : 4;
    if (strcmp(argv[1], "threads") != 0)
        threads = 1;
    threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
    signal(SIGTERM, on_term);
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    must(cuInit(0), "cuInit");
    must(cuDeviceGet(&dev, device), "cuDeviceGet");
    must(cuDevicePrimaryCtxSetFlags_v2(dev, 0x04), "cuDevicePrimaryCtxSetFlags"); /* BLOCKING_SYNC */
    must(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    int sms = 1;
    must(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
         "cuDeviceGetAttribute");
    must(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    must(cuModuleLoadData(&mod, "spin"), "cuModuleLoadData");
    must(cuModuleGetFunction(&f, mod, "spin"), "cuModuleGetFunction");
    printf("ready\n");
    fflush(stdout);
    double start = started = now_s();
    deadline = start + atof(argv[2]);
    struct job jobs[64];
    pthread_t tids[64];
    for (int t = 0; t < threads; t++) {
        jobs[t] = (struct job){ctx, sms, f, argv[1], 0, 0};
        pthread_create(&tids[t], NULL, run, &jobs[t]);
    }
    long kernels = 0;
    uint64_t work = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
        kernels += jobs[t].kernels;
        work += jobs[t].work_ns;
    }
    printf("{\"kernels\": %ld, \"work_ns\": %llu, \"seconds\": %.3f}\n", kernels,
           (unsigned long long)work, now_s() - start);
    return 0;
}
