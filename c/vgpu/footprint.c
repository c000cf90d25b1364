/* The device memory the driver charges this process beyond what the shim counts: context,
 * modules loaded as kernels are first used, page rounding, anything else the driver spends on
 * the process through no hooked call ("the footprint"). It is counted on the process's slot
 * like an allocation, so the cap holds by the driver's own count.
 *
 * The figure is the driver's: NVML's per-process usage of this process, minus what the shim
 * already counts for it. NVML names processes by host PID, which a container without hostPID
 * does not know; the shim finds its host PID by difference: the PID that appears in the
 * device's process list when this process creates its first context (a PID equal to getpid()
 * serves too, for hostPID containers). Without it (NVML missing, or two processes of the
 * container starting at once), the configured HAMI_VGPU_CONTEXT_OVERHEAD stays the estimate.
 *
 * Refreshing costs an NVML call, so it is not done on every allocation: only when the figure
 * is older than REFRESH_NS, when a charge would bring the device within MARGIN of its limit,
 * and before any refusal. Far from the limit a stale figure cannot let the cap pass; near it
 * every decision is taken on a fresh one. NVML calls are safe during stream capture. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "vgpu.h"

#define REFRESH_NS 100000000LL /* 100 ms */
#define MAX_LISTED 256

static pthread_mutex_t fp_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int host_pid;     /* 0: not known */
static pid_t host_pid_owner;      /* getpid() when it was found: a forked child looks again */
static int nvml_usable = -1;      /* -1: not tried; 0: no NVML; 1: initialised */
static uint64_t extra[VGPU_MAX_DEVICES];   /* footprint counted per record */
static int64_t refreshed[VGPU_MAX_DEVICES];
static unsigned int before[MAX_LISTED];
static unsigned int before_count;
static int before_rec = -1;

static int nvml_ok(void)
{
    if (nvml_usable < 0)
        nvml_usable = vgpu_nvml_ready() == NVML_SUCCESS && CALL_NVML(nvmlInit_v2) == NVML_SUCCESS;
    return nvml_usable;
}

/* The device's process list (NVML, driver's figures); -1 when it cannot be read. */
static int list(int rec, nvmlProcessInfo_t *out, unsigned int *n)
{
    nvmlDevice_t dev;
    if (!nvml_ok() || CALL_NVML(nvmlDeviceGetHandleByUUID, vgpu_device_at(rec)->uuid, &dev) !=
                          NVML_SUCCESS)
        return -1;
    *n = MAX_LISTED;
    return CALL_NVML(nvmlDeviceGetComputeRunningProcesses_v3, dev, n, out) == NVML_SUCCESS ? 0
                                                                                          : -1;
}

static int listed(const nvmlProcessInfo_t *l, unsigned int n, unsigned int pid)
{
    for (unsigned int i = 0; i < n; i++)
        if (l[i].pid == pid)
            return (int)i;
    return -1;
}

static int known_locked(void) { return host_pid && host_pid_owner == getpid(); }

void vgpu_footprint_before_context(int rec)
{
    if (rec < 0)
        return;
    nvmlProcessInfo_t l[MAX_LISTED];
    unsigned int n = 0;
    pthread_mutex_lock(&fp_lock);
    if (!known_locked() && list(rec, l, &n) == 0) {
        for (unsigned int i = 0; i < n; i++)
            before[i] = l[i].pid;
        before_count = n;
        before_rec = rec;
    }
    pthread_mutex_unlock(&fp_lock);
}

/* Finds this process in a list taken after its context appeared; 0 when unsure. */
static unsigned int find_me(int rec, const nvmlProcessInfo_t *l, unsigned int n)
{
    if (listed(l, n, (unsigned int)getpid()) >= 0)
        return (unsigned int)getpid();
    if (rec != before_rec)
        return 0;
    unsigned int found = 0, fresh = 0;
    for (unsigned int i = 0; i < n; i++) {
        int seen = 0;
        for (unsigned int j = 0; j < before_count && !seen; j++)
            seen = before[j] == l[i].pid;
        if (!seen) {
            found = l[i].pid;
            fresh++;
        }
    }
    return fresh == 1 ? found : 0;
}

/* Moves this process's footprint on `rec` to the driver's figure; lock held. A failed read
 * changes nothing: charges are never dropped for want of a figure. */
static void refresh_locked(int rec)
{
    nvmlProcessInfo_t l[MAX_LISTED];
    unsigned int n = 0;
    uint64_t mine = 0;
    /* The driver's list and the slot must be read with no charge or free of this process in
     * between (another thread's free would make the driver's older figure look like
     * footprint); a few tries, else nothing changes until the next refresh. */
    int consistent = 0;
    for (int attempt = 0; attempt < 4 && !consistent; attempt++) {
        uint64_t generation = vgpu_ledger_generation();
        if (list(rec, l, &n) < 0)
            return;
        mine = vgpu_my_used(rec);
        consistent = generation == vgpu_ledger_generation();
    }
    if (!consistent)
        return;
    if (!known_locked()) {
        unsigned int me = find_me(rec, l, n);
        if (!me)
            return;
        host_pid = me;
        host_pid_owner = getpid();
        vgpu_ledger_set_host_pid((int32_t)me);
        vgpu_log(VGPU_LOG_INFO, "the driver names this process %u", me);
    }
    int i = listed(l, n, host_pid);
    uint64_t driver = i >= 0 ? l[i].usedGpuMemory : 0;
    /* NVML_VALUE_NOT_AVAILABLE (all ones) where the driver will not say: no figure. */
    if (driver > vgpu_device_at(rec)->total_bytes)
        return;
    uint64_t counted = mine > extra[rec] ? mine - extra[rec] : 0;
    uint64_t want = driver > counted ? driver - counted : 0;
    if (want > extra[rec])
        vgpu_charge_anyway(rec, want - extra[rec]); /* the driver already spent it */
    else
        vgpu_uncharge(rec, extra[rec] - want);
    extra[rec] = want;
    refreshed[rec] = vgpu_now_ns();
}

void vgpu_footprint_after_context(int rec, uint64_t counted)
{
    if (rec < 0)
        return;
    pthread_mutex_lock(&fp_lock);
    uint64_t had = extra[rec];
    int64_t stamp = refreshed[rec];
    refresh_locked(rec);
    /* A context's own cost, as the driver charged it: what the footprint grew by, plus what
     * was charged for it beforehand. The container's next contexts are charged this much
     * before the driver is asked, so one that cannot fit is refused before it exists. */
    if (refreshed[rec] != stamp && extra[rec] >= had)
        __atomic_store_n(&vgpu_device_at(rec)->ctx_estimate, extra[rec] - had + counted,
                         __ATOMIC_RELAXED);
    before_rec = -1;
    pthread_mutex_unlock(&fp_lock);
}

void vgpu_footprint_refresh(int rec)
{
    if (rec < 0 || rec >= VGPU_MAX_DEVICES || !__atomic_load_n(&host_pid, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&fp_lock);
    refresh_locked(rec);
    pthread_mutex_unlock(&fp_lock);
}

void vgpu_footprint_check(int rec, uint64_t bytes)
{
    if (!__atomic_load_n(&host_pid, __ATOMIC_RELAXED) || rec < 0 || rec >= VGPU_MAX_DEVICES)
        return;
    const struct vgpu_device *d = vgpu_device_at(rec);
    uint64_t limit = __atomic_load_n(&d->limit_bytes, __ATOMIC_RELAXED);
    uint64_t used = __atomic_load_n(&d->used_bytes, __ATOMIC_RELAXED);
    uint64_t margin = (64ULL << 20) + limit / 16;
    int near = limit && (used + bytes + margin > limit || bytes > limit);
    if (!near && vgpu_now_ns() - __atomic_load_n(&refreshed[rec], __ATOMIC_RELAXED) < REFRESH_NS)
        return;
    vgpu_footprint_refresh(rec);
}

uint64_t vgpu_footprint_of(int rec)
{
    return rec >= 0 && rec < VGPU_MAX_DEVICES ? __atomic_load_n(&extra[rec], __ATOMIC_RELAXED) : 0;
}

unsigned int vgpu_host_pid(void)
{
    pthread_mutex_lock(&fp_lock);
    unsigned int pid = known_locked() ? host_pid : 0;
    pthread_mutex_unlock(&fp_lock);
    return pid;
}

static void forget_in_child(void)
{
    /* A forked child is another process: another host PID, nothing of its own yet. */
    host_pid = 0;
    memset(extra, 0, sizeof extra);
    memset(refreshed, 0, sizeof refreshed);
    pthread_mutex_init(&fp_lock, NULL);
}

__attribute__((constructor)) static void footprint_atfork(void)
{
    pthread_atfork(NULL, NULL, forget_in_child);
}
