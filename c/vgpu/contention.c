/* Separating a kernel's own time from time the device gave to others.
 *
 * Without MPS a GPU time-slices between contexts: while a kernel of ours waits for its turn,
 * another context (another container, or another process of ours) runs for a time slice,
 * and the events around our kernel count that slice as ours. Nothing in the event pair says
 * so, but two PID-free facts do: the device's utilization (NVML) above what this process's
 * own event pairs measured means someone else uses it (the raw measurements, not what was
 * charged: a process that undercharged itself must not conclude it has company), and NVML's
 * count of contexts on the device says how many others may be waiting for a turn (k). A kernel's own time is then what is left after taking out
 * whole rounds of the others' slices, k slices per round of (k + 1):
 *
 *     own = measured - k * slice * round(measured / ((k + 1) * slice))
 *
 * which halves a long kernel sharing the device with one saturating neighbour. A sample
 * shorter than one round is a kernel that straddled a switch or not: the others' slices
 * taken out are the whole slices (0 to k) that best explain its excess over its expected
 * cost, so that a short kernel that did not straddle stays whole. The slice is the driver's (`nvidia-smi compute-policy
 * --set-timeslice`); VGPU_TIMESLICE_US says it when it is not the default 2 ms.
 *
 * The NVML figures are refreshed at most every REFRESH_NS per process, from the launch path.
 */
#include <stdlib.h>

#include "limiter.h"

#define REFRESH_NS 100000000LL
#define DEFAULT_SLICE_NS 2000000LL
#define ALONE_PPM 20000 /* utilization within 2 points of our own share: nobody else */
#define WINDOW_NS 1000000000LL

static int others;          /* k, as of the last refresh */
static int64_t refreshed_ns;
static int64_t raw_ns, raw_since_ns; /* event-pair time measured in this window */
static uint32_t raw_ppm;             /* ... over the last complete window, x 1e6 */
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

/* Contexts on the device besides this one while it is shared; 0 when we are alone. */
static int count_others(int rec)
{
    static int initialised;
    nvmlDevice_t dev;
    nvmlUtilization_t util;
    unsigned int n = 0;
    if (!initialised)
        initialised = vgpu_nvml_ready() == NVML_SUCCESS &&
                      CALL_NVML(nvmlInit_v2) == NVML_SUCCESS ? 1 : -1;
    if (initialised < 0 ||
        CALL_NVML(nvmlDeviceGetHandleByUUID, vgpu_device_at(rec)->uuid, &dev) != NVML_SUCCESS ||
        CALL_NVML(nvmlDeviceGetUtilizationRates, dev, &util) != NVML_SUCCESS)
        return 0;
    nvmlReturn_t rc = CALL_NVML(nvmlDeviceGetComputeRunningProcesses_v3, dev, &n, NULL);
    if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE)
        return 0;
    if ((int64_t)util.gpu * 10000 <= (int64_t)raw_ppm + ALONE_PPM)
        return 0;
    return n > 1 ? (int)n - 1 : 0;
}

void vgpu_contention_measured(int64_t measured_ns)
{
    __atomic_fetch_add(&raw_ns, measured_ns, __ATOMIC_RELAXED);
}

void vgpu_contention_refresh(int rec, int64_t now)
{
    if (now - refreshed_ns < REFRESH_NS)
        return;
    refreshed_ns = now;
    if (now - raw_since_ns >= WINDOW_NS) { /* NVML's utilization covers about a second */
        int64_t raw = __atomic_exchange_n(&raw_ns, 0, __ATOMIC_RELAXED);
        raw_ppm = raw_since_ns ? (uint32_t)((double)raw * 1e6 / (double)(now - raw_since_ns)) : 0;
        raw_since_ns = now;
    }
    __atomic_store_n(&others, count_others(rec), __ATOMIC_RELAXED);
}

int64_t vgpu_own_time(int64_t measured_ns, int64_t expected_ns)
{
    int k = __atomic_load_n(&others, __ATOMIC_RELAXED);
    if (k <= 0)
        return measured_ns;
    int64_t slice = timeslice(), slices;
    if (expected_ns >= 0 && measured_ns < (k + 1) * slice) {
        /* Shorter than one round: 0 to k others' slices, as many as explain the excess. */
        slices = (int64_t)((double)(measured_ns - expected_ns) / (double)slice + 0.5);
        slices = slices < 0 ? 0 : slices > k ? k : slices;
    } else {
        slices = k * (int64_t)((double)measured_ns / (double)((k + 1) * slice) + 0.5);
    }
    int64_t own = measured_ns - slices * slice;
    return own > 0 ? own : 0;
}
