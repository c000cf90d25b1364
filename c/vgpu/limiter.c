/* The compute limiter's launch path (limiter.h explains the pieces and the seam).
 *
 * admit, before the real launch:
 *   1. a launch that a capture records instead of running is not charged;
 *   2. the device record of the current context gives the limit (the shared file's: every
 *      process of the container uses the same one); no limit there, nothing to do;
 *   3. finished measurements of this thread are read back (never waiting);
 *   4. the launch's estimate is looked up; a signature never measured that this thread is
 *      measuring right now is settled first, so it is not launched over and over unpriced;
 *   5. wait until the container has credit (bucket.c), then charge the estimate (when
 *      unknown, the last duration measured in the process; its measurement corrects it);
 *   6. measure this launch if its cost is unknown, or if this thread's sampling is due (and
 *      its stream is not capturing).
 * done, after it: the end event, or the refund of a launch the driver refused.
 *
 * A measurement corrects the budget only for launches charged without an estimate; otherwise
 * it refines the estimate (costs.c), which prices the following launches.
 */
#include "limiter.h"

int vgpu_limiter_on;
/* The last duration measured in this process: the price of a signature never measured yet
 * (corrected by its own measurement), better than nothing for programs with many kernels. */
static int64_t typical_ns;

void vgpu_limiter_init(const struct vgpu_config *cfg)
{
    for (int i = 0; i < VGPU_MAX_DEVICES; i++)
        if (cfg->sm_limit[i] > 0 && cfg->sm_limit[i] < 100 && cfg->policy != VGPU_POLICY_DISABLE)
            vgpu_limiter_on = 1;
    if (vgpu_limiter_on)
        vgpu_log(VGPU_LOG_INFO, "compute limit on (device 0: %u%%; share of device time)",
                 cfg->sm_limit[0]);
}

/* The limit of a record, 0 when it has none. */
static uint32_t limit_of(int rec)
{
    uint32_t pct = __atomic_load_n(&vgpu_device_at(rec)->sm_limit, __ATOMIC_RELAXED);
    return pct < 100 ? pct : 0;
}

/* A finished measurement: refine the estimate; settle a launch charged without one. */
static void measured(struct vgpu_cost *cost, int rec, int64_t charged_ns, int unknown,
                     int64_t measured_ns)
{
    if (cost)
        vgpu_cost_sample(cost, measured_ns);
    __atomic_store_n(&typical_ns, measured_ns, __ATOMIC_RELAXED);
    uint32_t pct = limit_of(rec);
    if (unknown && pct && measured_ns != charged_ns)
        vgpu_bucket_charge(&vgpu_device_at(rec)->compute, measured_ns - charged_ns, pct,
                           vgpu_now_ns(), 0);
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
    if (!capturing)
        vgpu_measure_drain(measured);
    struct vgpu_cost *cost = vgpu_cost_of(vgpu_cost_key(launch, rec));
    int64_t estimate = cost ? vgpu_cost_estimate(cost) : -1;
    if (estimate < 0 && cost && !capturing && vgpu_measure_settle(cost, measured))
        estimate = vgpu_cost_estimate(cost);
    struct vgpu_compute *budget = &vgpu_device_at(rec)->compute;
    int64_t now = vgpu_bucket_wait(budget, vgpu_now_ns());
    int unknown = estimate < 0;
    t->rec = rec;
    t->charged_ns = unknown ? __atomic_load_n(&typical_ns, __ATOMIC_RELAXED) : estimate;
    vgpu_bucket_charge(budget, t->charged_ns, pct, now, 1);
    /* A capture begun through an entry point the shim does not hook is still never timed. */
    if (!capturing && (unknown || vgpu_measure_due(now)) &&
        !vgpu_stream_captures(launch->stream, launch->per_thread))
        t->sample = vgpu_measure_begin(launch, cost, rec, t->charged_ns, unknown, measured);
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
        vgpu_bucket_charge(&vgpu_device_at(t->rec)->compute, -t->charged_ns, pct, vgpu_now_ns(),
                           -1);
}
