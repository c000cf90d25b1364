/* The compute limiter's launch path (limiter.h explains the pieces and the seam).
 *
 * admit, before the real launch (never waits for a measurement):
 *   1. a launch that a capture records instead of running is not charged;
 *   2. the device record of the current context gives the limit (the shared file's: every
 *      process of the container uses the same one); no limit there, nothing to do;
 *   3. finished measurements of this thread are read back (never waiting) and settled;
 *   4. wait until the container has credit (bucket.c), then charge the signature's estimate
 *      (a signature never measured: the last duration measured in the process);
 *   5. measure the launch when costs.c says so (and its stream is not capturing).
 * done, after it: the end event, or the refund of a launch the driver refused.
 *
 * Settling a measurement: for a launch whose signature is unknown or variable (costs.c),
 * what it really cost minus what it was charged is a debt (or a credit) charged to the
 * budget at once, so the next launches repay it: the share holds whatever the relation
 * between a kernel's signature and its cost. Such launches are all measured; when the ring
 * of measurements was full, the next one also stands for those it skipped. A steady
 * signature's sample only refines its estimate (the smallest recent sample): it agrees with
 * it by definition, and a disagreeing one makes the signature variable, so its next launches
 * are settled; charging steady samples' small excess would charge the host's launch latency
 * that every event pair on an idle stream includes, not device time.
 *
 * Own time and others' time: an event pair includes any turn the device gave another context
 * while the kernel ran; every sample loses what contention.c says the device's sharing can
 * explain, down to the signature's base (a first sample: the process's last own time).
 */
#include "limiter.h"

int vgpu_limiter_on;
/* The last duration measured in this process: the price of a signature never measured yet
 * (corrected by its own measurement), better than nothing for programs with many kernels. */
static int64_t typical_ns;

void vgpu_limiter_init(const struct vgpu_config *cfg)
{
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        uint32_t by_ordinal = cfg->sm_limit[i];
        uint32_t by_uuid = i < cfg->n_by_uuid ? cfg->by_uuid[i].sm : 0;
        if (((by_ordinal > 0 && by_ordinal < 100) || (by_uuid > 0 && by_uuid < 100)) &&
            cfg->policy != VGPU_POLICY_DISABLE)
            vgpu_limiter_on = 1;
    }
    if (vgpu_limiter_on)
        vgpu_log(VGPU_LOG_INFO, "compute limit on (device 0: %u%%; share of device time)",
                 cfg->sm_limit[0]);
}

/* The limit of a record in effect now (priority may lower it), 0 when it has none. */
static uint32_t limit_of(int rec)
{
    uint32_t pct = __atomic_load_n(&vgpu_device_at(rec)->sm_limit, __ATOMIC_RELAXED);
    return pct < 100 ? vgpu_priority_limit(pct) : 0;
}

/* A finished measurement: refine the estimate and settle the debt (see the top). */
static void measured(struct vgpu_cost *cost, int rec, int64_t charged_ns, uint32_t weight,
                     int64_t measured_ns)
{
    int64_t before = cost ? vgpu_cost_estimate(cost) : -1;
    int steady = cost && before >= 0 && !vgpu_cost_variable(cost);
    /* Others' turns come out of every sample, never below what the signature took lately,
     * or for its first sample what the process's last one took (nothing known at all: the
     * sample whole). Settling first samples whole overcharged a program of ever new shapes
     * beside a busy neighbour: 15 % of its 30. */
    int64_t typical = __atomic_load_n(&typical_ns, __ATOMIC_RELAXED);
    int64_t least = before >= 0 ? vgpu_cost_base(cost) : typical > 0 ? typical : measured_ns;
    int64_t own = vgpu_own_time(measured_ns, least);
    if (cost)
        vgpu_cost_sample(cost, measured_ns, own);
    measured_ns = own;
    __atomic_store_n(&typical_ns, measured_ns, __ATOMIC_RELAXED);
    if (steady)
        return; /* its samples agree with its estimate (or this one makes it variable) */
    int64_t debt = measured_ns - charged_ns +
                   (int64_t)(weight - 1) * (measured_ns - (before < 0 ? charged_ns : before));
    uint32_t pct = limit_of(rec);
    if (pct && debt)
        vgpu_anchor_charge(rec, debt, pct, vgpu_now_ns(), 0);
}

CUresult vgpu_limiter_admit(const struct vgpu_launch *launch, struct vgpu_ticket *t)
{
    *t = (struct vgpu_ticket){.rec = -1};
    int capturing = vgpu_capture_active();
    if (capturing && vgpu_stream_captures(launch->stream, launch->per_thread))
        return CUDA_SUCCESS; /* recorded into a graph, not run */
    CUresult rc;
    int rec = vgpu_current_record(&rc);
    uint32_t pct = rec >= 0 ? limit_of(rec) : 0;
    if (!pct)
        return CUDA_SUCCESS; /* unlimited, or no context: the driver will say so */
    int64_t now = vgpu_now_ns();
    if (!capturing) {
        vgpu_contention_refresh(rec, now);
        vgpu_measure_drain(measured, now);
        vgpu_anchor_check(rec, pct, now);
    }
    struct vgpu_cost *cost = vgpu_cost_of(vgpu_cost_key(launch, rec), now);
    int64_t estimate = vgpu_cost_estimate(cost);
    int due = vgpu_cost_due(cost, now);
    struct vgpu_compute *budget = &vgpu_device_at(rec)->compute;
    now = vgpu_bucket_wait(budget, now);
    t->rec = rec;
    t->charged_ns = estimate >= 0 ? estimate : __atomic_load_n(&typical_ns, __ATOMIC_RELAXED);
    vgpu_anchor_charge(rec, t->charged_ns, pct, now, 1);
    /* A capture begun through an entry point the shim does not hook is still never timed. */
    if (!capturing && due && !vgpu_stream_captures(launch->stream, launch->per_thread))
        t->sample = vgpu_measure_begin(launch, cost, rec, t->charged_ns);
    return CUDA_SUCCESS;
}

void vgpu_limiter_done(const struct vgpu_launch *launch, struct vgpu_ticket *t, CUresult rc)
{
    if (t->sample)
        vgpu_measure_end(t->sample, launch, rc == CUDA_SUCCESS);
    if (rc == CUDA_SUCCESS || t->rec < 0 || !t->charged_ns)
        return; /* the usual case: nothing to refund */
    uint32_t pct = limit_of(t->rec);
    if (pct)
        vgpu_anchor_charge(t->rec, -t->charged_ns, pct, vgpu_now_ns(), -1);
}
