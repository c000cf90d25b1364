/* Anchoring what the limiter charges a process to what the driver counts for it.
 *
 * contention.c takes out of every sample what other contexts' turns can explain: a bound,
 * since nothing in an event pair says what the others really took. Beside a neighbour that
 * uses few of its turns the bound takes too much: a 20 ms kernel beside a container at 10 %
 * lost five of its turns, half its time, and ran at 90 % under a 50 % limit; 5 ms kernels ran
 * at 64 %. The driver counts each process's device time itself: NVML's per-process
 * utilization (smUtil), for the process's host PID (found by footprint.c; nothing here is
 * done while it is unknown). Two uses:
 *
 *   observe  at each contention refresh (at most every 100 ms): this process's share of the
 *            device lately, which tells contention.c how much of the device the others used
 *            (so a long sample loses what they can have taken, not a whole turn per round),
 *            and is integrated over time into the device time the driver counted for it;
 *   check    once a second: the driver's count over that second against what the limiter
 *            charged the process there (its own charges: estimates, debts, refunds; never this
 *            file's), and the shortfall beyond SLACK_PPM charged to the container's budget as
 *            a debt, spread over the next second (charged at once, a 30 ms debt at a 30 %
 *            limit stopped a container for 100 ms) and repaid by its launches. Only a shortfall: where the model charges
 *            more than the driver counted, it is on the safe side of the limit by design (a
 *            short kernel that straddled others' turns).
 */
#include <pthread.h>
#include <time.h>

#include "limiter.h"

#define ANCHOR_NS 1000000000LL /* a check covers about a second, as NVML's figure does */
#define SLACK_PPM 10000        /* 1 point: NVML counts whole percents */
#define MAX_SAMPLES 256

static int64_t charged_ns[VGPU_MAX_DEVICES]; /* the limiter's charges of this process */
static int64_t driver_ns[VGPU_MAX_DEVICES];  /* device time the driver counted for it */
static struct {
    int64_t at_ns;            /* the last observation (0: none) */
    unsigned long long seen;  /* NVML's timestamp of the newest sample read (epoch us) */
} reads[VGPU_MAX_DEVICES];
static struct {
    int64_t at_ns, charged_at, driver_at; /* the last check and both counts then */
    int64_t owed_ns, paid_at;             /* the debt still to charge, and when last paid */
} checks[VGPU_MAX_DEVICES];
static pthread_mutex_t anchor_lock = PTHREAD_MUTEX_INITIALIZER;

void vgpu_anchor_charge(int rec, int64_t device_ns, uint32_t pct, int64_t now, int launches)
{
    __atomic_fetch_add(&charged_ns[rec], device_ns, __ATOMIC_RELAXED);
    vgpu_bucket_charge(&vgpu_device_at(rec)->compute, device_ns, pct, now, launches);
}

/* This process's smUtil in ppm, averaged over NVML's samples since the last read (0 when it
 * has none of it: it ran nothing); -1 when NVML cannot say. */
static int64_t driver_share(nvmlDevice_t dev, unsigned int pid, unsigned long long *seen)
{
    nvmlProcessUtilizationSample_t samples[MAX_SAMPLES];
    unsigned int n = MAX_SAMPLES;
    if (!*seen) { /* the first read: the last second (NVML keeps a longer history) */
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        *seen = (unsigned long long)wall.tv_sec * 1000000ULL - 1000000ULL +
                (unsigned long long)wall.tv_nsec / 1000;
    }
    nvmlReturn_t rc = CALL_NVML(nvmlDeviceGetProcessUtilization, dev, samples, &n, *seen);
    if (rc == NVML_ERROR_NOT_FOUND)
        return 0;
    if (rc != NVML_SUCCESS)
        return -1;
    int64_t sum = 0, count = 0;
    for (unsigned int i = 0; i < n && i < MAX_SAMPLES; i++) {
        if (samples[i].timeStamp > *seen)
            *seen = samples[i].timeStamp;
        if (samples[i].pid == pid)
            sum += samples[i].smUtil, count++;
    }
    return count ? sum * 10000 / count : 0;
}

int64_t vgpu_anchor_observe(int rec, nvmlDevice_t dev, int64_t now)
{
    unsigned int pid = vgpu_host_pid();
    int64_t share = pid ? driver_share(dev, pid, &reads[rec].seen) : -1;
    if (share < 0)
        return -1;
    int64_t since = now - reads[rec].at_ns;
    if (reads[rec].at_ns && since <= ANCHOR_NS)
        __atomic_fetch_add(&driver_ns[rec], share * since / 1000000, __ATOMIC_RELAXED);
    reads[rec].at_ns = now;
    return share;
}

/* Charges the part of the debt due by now: the debt of a check over the second after it. */
static void pay(int rec, uint32_t pct, int64_t now)
{
    int64_t owed = checks[rec].owed_ns, due = owed * (now - checks[rec].paid_at) / ANCHOR_NS;
    due = due < owed ? due : owed;
    if (due > 0) {
        vgpu_bucket_charge(&vgpu_device_at(rec)->compute, due, pct, now, 0);
        checks[rec].owed_ns -= due;
        checks[rec].paid_at = now;
    }
}

void vgpu_anchor_check(int rec, uint32_t pct, int64_t now)
{
    if ((!__atomic_load_n(&checks[rec].owed_ns, __ATOMIC_RELAXED) &&
         now - __atomic_load_n(&checks[rec].at_ns, __ATOMIC_RELAXED) < ANCHOR_NS) ||
        pthread_mutex_trylock(&anchor_lock) != 0)
        return;
    pay(rec, pct, now);
    if (now - checks[rec].at_ns < ANCHOR_NS) {
        pthread_mutex_unlock(&anchor_lock);
        return;
    }
    int64_t charged = __atomic_load_n(&charged_ns[rec], __ATOMIC_RELAXED);
    int64_t driver = __atomic_load_n(&driver_ns[rec], __ATOMIC_RELAXED);
    int64_t span = now - checks[rec].at_ns, counted = driver - checks[rec].driver_at;
    int64_t ours = charged - checks[rec].charged_at;
    if (checks[rec].at_ns && span <= 2 * ANCHOR_NS && counted > 0 &&
        (counted - ours) * 1000000 > SLACK_PPM * span) {
        int64_t debt = counted - ours - SLACK_PPM * span / 1000000;
        __atomic_store_n(&checks[rec].owed_ns, checks[rec].owed_ns + debt, __ATOMIC_RELAXED);
        checks[rec].paid_at = now;
        vgpu_log(VGPU_LOG_DEBUG, "device %d: the driver counted %.1f ms of the last %.2f s for "
                 "this process, the limiter charged %.1f ms: %.1f ms more charged", rec,
                 counted / 1e6, span / 1e9, ours / 1e6, debt / 1e6);
    }
    checks[rec].charged_at = charged;
    checks[rec].driver_at = driver;
    __atomic_store_n(&checks[rec].at_ns, now, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&anchor_lock);
}
