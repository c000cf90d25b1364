/* Simulated NVML: utilization, running processes and XID event sets. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mig.h"
#include "nvml_internal.h"

#define WINDOW_NS 1000000000LL /* utilization is busy time over the last second */
#define EVENT_POLL_NS 2000000LL

static unsigned int percent(int64_t busy, int64_t window)
{
    int64_t p = (busy * 100 + window / 2) / window;
    return (unsigned int)(p > 100 ? 100 : p);
}

/* NVML's reference: "On MIG-enabled GPUs, querying device utilization rates is not currently
 * supported" (nvidia-smi shows N/A), for the GPU and for its MIG devices alike. */
static int mig_enabled(nvmlDevice_t h, struct sim_device *d)
{
    if (sim_nvml_mig_uuid(h))
        return 1;
    const struct sim_mig_gpu *m = sim_mig_of(d);
    return m && m->mode_current == SIM_MIG_ENABLE;
}

SIM_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, u);
    if (rc != NVML_SUCCESS)
        return rc;
    if (mig_enabled(h, d))
        return NVML_ERROR_NOT_SUPPORTED;
    int64_t now = sim_now_ns();
    sim_lock();
    int64_t busy = sim_busy_binned_ns_locked(d, now - WINDOW_NS, now, 0);
    sim_unlock();
    u->gpu = percent(busy, WINDOW_NS);
    u->memory = 0; /* kernels never touch memory in the simulator */
    return NVML_SUCCESS;
}

/* One sample per process using the device: its share of the last second. */
SIM_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h,
                                                     nvmlProcessUtilizationSample_t *samples,
                                                     unsigned int *count,
                                                     unsigned long long lastSeenTimeStamp)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, count);
    if (rc != NVML_SUCCESS)
        return rc;
    if (mig_enabled(h, d))
        return NVML_ERROR_NOT_SUPPORTED;
    int64_t now = sim_now_ns();
    /* NVML stamps samples in Unix-epoch microseconds; callers ask for "newer than T" in it. */
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    unsigned long long stamp = (unsigned long long)wall.tv_sec * 1000000ULL +
                               (unsigned long long)wall.tv_nsec / 1000;
    nvmlProcessUtilizationSample_t found[SIM_MAX_PROCS];
    unsigned int n = 0;
    sim_lock();
    sim_reap_locked(d, 0);
    for (int i = 0; i < SIM_MAX_PROCS && stamp > lastSeenTimeStamp; i++) {
        const struct sim_proc *p = &d->procs[i];
        int32_t pid = p->pid ? sim_nvml_pid(p) : 0;
        if (!pid)
            continue; /* no process, or one the caller cannot see */
        memset(&found[n], 0, sizeof found[n]);
        found[n].pid = (unsigned int)pid;
        found[n].timeStamp = stamp;
        found[n].smUtil = percent(sim_busy_binned_ns_locked(d, now - WINDOW_NS, now, p->pid), WINDOW_NS);
        n++;
    }
    sim_unlock();
    if (n == 0)
        return NVML_ERROR_NOT_FOUND;
    if (!samples || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(samples, found, n * sizeof *found);
    *count = n;
    return NVML_SUCCESS;
}

static nvmlReturn_t processes(nvmlDevice_t h, unsigned int *count, nvmlProcessInfo_t *infos,
                              int compute)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, count);
    if (rc != NVML_SUCCESS)
        return rc;
    nvmlProcessInfo_t found[SIM_MAX_PROCS * SIM_MIG_GIS];
    struct sim_mig_part parts[SIM_MIG_GIS];
    unsigned int n = 0;
    sim_lock();
    int nparts = sim_mig_parts_locked(d, parts);
    for (int r = 0; r < nparts; r++) {
        struct sim_device *x = parts[r].record;
        sim_reap_locked(x, 1);
        for (int i = 0; compute && i < SIM_MAX_PROCS; i++) {
            const struct sim_proc *p = &x->procs[i];
            int32_t pid = p->pid ? sim_nvml_pid(p) : 0;
            if (!pid)
                continue; /* no process, or one the caller cannot see */
            found[n].pid = (unsigned int)pid;
            found[n].usedGpuMemory = sim_reported(p->used_bytes);
            found[n].gpuInstanceId = parts[r].gi_id;
            found[n].computeInstanceId = parts[r].ci_id;
            n++;
        }
    }
    sim_unlock();
    if (*count < n || (n && !infos)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n)
        memcpy(infos, found, n * sizeof *found);
    *count = n;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *count,
                                                             nvmlProcessInfo_t *infos)
{
    return processes(h, count, infos, 1);
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *count,
                                                             nvmlProcessInfo_t *infos)
{
    return processes(h, count, infos, 1); /* nvmlProcessInfo_v2_t: the same layout */
}

/* The unversioned entry point of older clients, with the first struct: pid and memory. */
SIM_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *count,
                                                          nvmlProcessInfo_v1_t *infos)
{
    unsigned int want = count ? *count : 0;
    nvmlProcessInfo_t found[SIM_MAX_PROCS];
    unsigned int n = want < SIM_MAX_PROCS ? want : SIM_MAX_PROCS;
    nvmlReturn_t rc = processes(h, &n, infos ? found : NULL, 1);
    if (rc == NVML_SUCCESS)
        for (unsigned int i = 0; i < n; i++)
            infos[i] = (nvmlProcessInfo_v1_t){found[i].pid, found[i].usedGpuMemory};
    if (count && (rc == NVML_SUCCESS || rc == NVML_ERROR_INSUFFICIENT_SIZE))
        *count = n;
    return rc;
}

/* The simulator runs no graphics work. */
SIM_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t h, unsigned int *count,
                                                              nvmlProcessInfo_t *infos)
{
    return processes(h, count, infos, 0);
}

/* An event set remembers, per device, the registered types and the last XID it delivered. */
struct nvmlEventSet_st {
    unsigned long long types[SIM_MAX_DEVICES];
    uint64_t seen[SIM_MAX_DEVICES];
};

SIM_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (sim_device_count() == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof **set);
    return *set ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

SIM_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t h, unsigned long long *types)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, types);
    if (rc == NVML_SUCCESS)
        *types = nvmlEventTypeXidCriticalError;
    return rc;
}

SIM_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t h, unsigned long long types,
                                              nvmlEventSet_t set)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, set);
    if (rc == NVML_SUCCESS && (types & ~(unsigned long long)nvmlEventTypeXidCriticalError))
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS && d->index >= SIM_MAX_DEVICES)
        rc = NVML_ERROR_NOT_SUPPORTED; /* XIDs are the GPU's: register the parent of a MIG device */
    if (rc != NVML_SUCCESS)
        return rc;
    sim_lock();
    set->seen[d->index] = d->xid_count; /* only events from now on */
    sim_unlock();
    set->types[d->index] |= types;
    return NVML_SUCCESS;
}

/* The oldest undelivered XID of any registered device; 0 when there is none. */
static int next_event(nvmlEventSet_t set, nvmlEventData_t *data)
{
    int got = 0;
    sim_lock();
    for (int i = 0; i < sim_device_count() && !got; i++) {
        struct sim_device *d = sim_device(i);
        if (!(set->types[i] & nvmlEventTypeXidCriticalError) || set->seen[i] >= d->xid_count)
            continue;
        uint64_t oldest = d->xid_count > SIM_XID_RING ? d->xid_count - SIM_XID_RING : 0;
        uint64_t seq = (set->seen[i] > oldest ? set->seen[i] : oldest) + 1;
        const struct sim_xid *x = &d->xids[(seq - 1) % SIM_XID_RING];
        memset(data, 0, sizeof *data);
        data->device = sim_nvml_handle(i);
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = x->xid;
        data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
        set->seen[i] = seq;
        got = 1;
    }
    sim_unlock();
    return got;
}

SIM_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                         unsigned int timeoutms)
{
    if (!set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (sim_device_count() == 0)
        return NVML_ERROR_UNINITIALIZED;
    int64_t deadline = sim_now_ns() + (int64_t)timeoutms * 1000000LL;
    /* Poll the shared ring: cheap, and it survives any process dying mid-wait. */
    for (;;) {
        if (next_event(set, data))
            return NVML_SUCCESS;
        int64_t now = sim_now_ns();
        if (now >= deadline)
            return NVML_ERROR_TIMEOUT;
        sim_sleep_until(now + (deadline - now < EVENT_POLL_NS ? deadline - now : EVENT_POLL_NS));
    }
}

SIM_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    free(set);
    return NVML_SUCCESS;
}

/* Simulator extension for `hami-sim inject-xid`: not part of NVML. */
SIM_API nvmlReturn_t hamiSimInjectXid(unsigned int index, unsigned long long xid)
{
    if (sim_open() != SIM_READY)
        return NVML_ERROR_UNINITIALIZED;
    return sim_inject_xid((int)index, xid) == 0 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}
