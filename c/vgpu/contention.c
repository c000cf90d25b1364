/* Separating a kernel's own time from time the device gave to others.
 *
 * Without MPS a GPU time-slices between contexts: while a kernel of ours waits for its turn,
 * another context (another container, or another process of ours) runs for a time slice,
 * and the events around our kernel count that slice as ours. Nothing in the event pair says
 * so, but two PID-free facts do: NVML's count of contexts on the device says how many others
 * may be waiting for a turn (k; none when ours is the only context), and the device's
 * utilization above this process's own charged share says whether they use it at all.
 *
 * A sample may contain up to k of the others' turns per round of (k + 1) (a turn ends early
 * when its context idles, so anything from nothing to k slices), so it loses the most they
 * can explain:
 *
 *     own = measured - k * slice * max(1, round(measured / ((k + 1) * slice)))
 *
 * and, in a sample of two rounds or more, no more than the others' use of the device says
 * (`measured * others' share`, the share being the device's utilization less this process's
 * by the driver's count, anchor.c; beside a light neighbour a whole turn per round halved a
 * long kernel), but never less than the signature's base (costs.c: the least it took lately)
 * nor more than the sample. That halves a long kernel sharing the device with one
 * saturating neighbour and leaves a short kernel that straddled others' turns its usual cost; rounding a short
 * sample's excess to whole slices instead charged a 100 us kernel that straddled two partial
 * turns seven times its cost, and a container of three at 30/30/40 % got 11 % of its 30.
 * The slice is the driver's (`nvidia-smi compute-policy --set-timeslice`); VGPU_TIMESLICE_US
 * says it when it is not the default 2 ms.
 *
 * Priority (CUDA_TASK_PRIORITY, HAMi's: 0 is the highest and the default). When containers
 * of different priorities share a GPU and together want more than it has, the device's time
 * slices would split it evenly between them whatever their limits. The rule: a container
 * with a lower priority (a number above 0) takes only what the others leave it, less
 * HEADROOM points, within its own limit:
 *
 *     effective limit = min(limit, max(FLOOR, 100 - others' use - HEADROOM))   if saturated
 *     effective limit = min(limit, own use + idle device)                       if not
 *
 * where others' use is the device's utilization minus this container's own share (NVML, no
 * PIDs). The headroom lets a higher-priority container that wants more show it (its use
 * grows into the room), and the second line gives the lower one back what is left idle: so
 * the higher one gets device time first, up to its limit, and the lower one at least what
 * the higher leaves, less up to HEADROOM. Containers of equal priority share as before.
 *
 * The NVML figures are refreshed at most every REFRESH_NS per process, from the launch path.
 */
#include <stdlib.h>

#include "limiter.h"

#define REFRESH_NS 100000000LL
#define DEFAULT_SLICE_NS 2000000LL
#define ALONE_PPM 20000 /* utilization within 2 points of our own share: nobody else */
#define HEADROOM_PPM 50000  /* 5 points */
#define FLOOR_PPM 10000     /* a lower-priority container never stops entirely: 1 point */
#define SATURATED_PPM 970000

static int others;          /* k, as of the last refresh */
static int64_t others_use_ppm = -1;  /* the others' share of the device lately; -1: unknown */
static int sharing;         /* other contexts on the device, busy or not */
static int64_t refreshed_ns;
static uint32_t yield_ppm;           /* priority: the share allowed now (0: no cap) */
static int64_t slice_ns;

static int64_t timeslice(void)
{
    if (!slice_ns) {
        const char *us = getenv("VGPU_TIMESLICE_US");
        long v = us ? atol(us) : 0;
        slice_ns = v > 0 ? v * 1000LL : DEFAULT_SLICE_NS;
    }
    return slice_ns;
}

/* A lower-priority container's allowed share given the device's utilization (see the top). */
static uint32_t allowed(int rec, uint32_t util_ppm)
{
    if (vgpu_config()->priority <= 0)
        return 0;
    int64_t mine = __atomic_load_n(&vgpu_device_at(rec)->compute.figures.share_ppm,
                                   __ATOMIC_RELAXED);
    int64_t others = (int64_t)util_ppm - mine, room;
    if (util_ppm >= SATURATED_PPM)
        room = 1000000 - (others > 0 ? others : 0) - HEADROOM_PPM;
    else
        room = mine + 1000000 - util_ppm;
    return (uint32_t)(room < FLOOR_PPM ? FLOOR_PPM : room);
}

int vgpu_nvml_device(int rec, nvmlDevice_t *dev)
{
    static int initialised;
    if (!__atomic_load_n(&initialised, __ATOMIC_ACQUIRE))
        __atomic_store_n(&initialised, vgpu_nvml_ready() == NVML_SUCCESS &&
                         CALL_NVML(nvmlInit_v2) == NVML_SUCCESS ? 1 : -1, __ATOMIC_RELEASE);
    if (initialised < 0 ||
        CALL_NVML(nvmlDeviceGetHandleByUUID, vgpu_device_at(rec)->uuid, dev) != NVML_SUCCESS)
        return -1;
    return 0;
}

/* Contexts on the device besides this one while it is shared; 0 when we are alone. */
static int count_others(int rec)
{
    nvmlDevice_t dev;
    nvmlUtilization_t util;
    unsigned int n = 0;
    if (vgpu_nvml_device(rec, &dev) < 0 ||
        CALL_NVML(nvmlDeviceGetUtilizationRates, dev, &util) != NVML_SUCCESS)
        return 0;
    __atomic_store_n(&yield_ppm, allowed(rec, util.gpu * 10000), __ATOMIC_RELAXED);
    /* This process's share by the driver's count when it can say (anchor.c), else what the
     * limiter charged it; the others' use is the rest of the device's utilization. */
    int64_t mine = vgpu_anchor_observe(rec, dev, vgpu_now_ns()), busy = util.gpu * 10000LL;
    __atomic_store_n(&others_use_ppm, mine < 0 ? -1 : busy > mine ? busy - mine : 0,
                     __ATOMIC_RELAXED);
    if (mine < 0)
        mine = __atomic_load_n(&vgpu_my_figures()->share_ppm, __ATOMIC_RELAXED);
    nvmlReturn_t rc = CALL_NVML(nvmlDeviceGetComputeRunningProcesses_v3, dev, &n, NULL);
    if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE)
        return 0;
    __atomic_store_n(&sharing, n > 1 ? (int)n - 1 : 0, __ATOMIC_RELAXED);
    if (n <= 1 || busy <= mine + ALONE_PPM)
        return 0;
    return (int)n - 1;
}

void vgpu_contention_refresh(int rec, int64_t now)
{
    if (now - refreshed_ns < REFRESH_NS)
        return;
    refreshed_ns = now;
    __atomic_store_n(&others, count_others(rec), __ATOMIC_RELAXED);
}

int vgpu_contention_grew(int64_t excess_ns)
{
    /* Others' turns leave some of a few samples clean, and a saturating neighbour's add a
     * slice; a cost that grows moves every sample, a little. */
    return __atomic_load_n(&others, __ATOMIC_RELAXED) <= 0 || excess_ns < timeslice() / 2;
}

uint32_t vgpu_priority_limit(uint32_t pct)
{
    uint32_t cap = __atomic_load_n(&yield_ppm, __ATOMIC_RELAXED);
    if (!cap || cap >= pct * 10000u)
        return pct;
    return cap / 10000 ? cap / 10000 : 1;
}

int64_t vgpu_own_time(int64_t measured_ns, int64_t least_ns)
{
    int k = __atomic_load_n(&others, __ATOMIC_RELAXED);
    if (k <= 0)
        return measured_ns;
    int64_t slice = timeslice(), rounds = 1;
    if (measured_ns >= (k + 1) * slice) /* our own turns inside it as well (rounded: flooring
                                          * overcharged the demo's 4 ms kernels shared three
                                          * ways, gpucores-30 at 22 %) */
        rounds = (int64_t)((double)measured_ns / (double)((k + 1) * slice) + 0.5);
    int64_t taken = rounds * k * slice;
    /* A sample of several rounds: the others took about their use of the device of it, not
     * a whole turn per round, so a long kernel beside a light neighbour is not halved
     * (their use: the device's utilization less this process's by the driver, anchor.c). */
    int64_t use = __atomic_load_n(&others_use_ppm, __ATOMIC_RELAXED);
    if (rounds >= 2 && use >= 0 && use * measured_ns / 1000000 < taken)
        taken = use * measured_ns / 1000000;
    int64_t own = measured_ns - taken;
    /* The floor is what the signature took lately, except in a sample of two rounds or more:
     * there the device gave us at least our turn of every round, so at least measured /
     * (k + 1) is ours whatever the signature's past. That lets a base learnt from a first
     * sample taken under contention come down: a 20 ms kernel at 10 % beside a neighbour's
     * 20 ms kernels, first measured at 40 ms, was charged double for good (5 % of its 10). */
    int64_t floor = least_ns;
    if (rounds >= 2 && measured_ns / (k + 1) < floor)
        floor = measured_ns / (k + 1);
    own = own > floor ? own : floor;
    own = own < measured_ns ? own : measured_ns;
    return own > 0 ? own : 0;
}
