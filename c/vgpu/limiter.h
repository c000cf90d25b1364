/* The compute limiter: CUDA_DEVICE_SM_LIMIT(_<i>) as a share of device time.
 *
 * What the limit means: a container limited to L% gets at most L% of the GPU's time, measured
 * over a window, whether it is alone on the GPU or not, and close to L% when it has the work.
 *
 * Pieces (one file each):
 *   bucket.c   the container's budget in the shared file: a token bucket in device time kept
 *              as one GCRA "theoretical arrival time" per device record, refilled at L% of
 *              wall time, updated with compare-and-swap only (no lock a killed process could
 *              hold; a dead process's charges simply expire as time passes). Also the
 *              figures hami-smi shows (achieved share per window, wake-ups).
 *   costs.c    what a launch is charged before it runs: per kernel signature (function,
 *              grid, block, device) or graph exec, steady (the smallest recent sample) or
 *              variable (its base; every launch measured and settled as a debt); evicting.
 *   contention.c  own time versus the time slices the device gave other contexts, and the
 *              priority rule (CUDA_TASK_PRIORITY) between containers sharing a device.
 *   measure.c  measuring: timing events recorded around sampled launches on the launch's
 *              own stream, read back later without waiting (per thread, no helper thread).
 *   cu_capture.c  stream capture: captured launches do not run, so they are not charged, and
 *              no event is touched while any capture is active in the process.
 *   limiter.c  the launch path: admit (wait for budget, charge the estimate, maybe start a
 *              measurement) before the real launch, done (finish the measurement) after it;
 *              settling finished measurements (debts).
 *
 * Nothing maps container PIDs to host PIDs: the limiter measures the container's own device
 * time from inside the container (NVML only for PID-free device figures, contention.c).
 *
 * The seam (cu_launch.c): every launch hook (cuLaunchKernel, cuLaunchKernelEx,
 * cuLaunchCooperativeKernel, cuGraphLaunch and their _ptsz variants, whichever route the
 * application used) does
 *
 *     if (VGPU_UNLIKELY(vgpu_limiter_on)) {
 *         rc = vgpu_limiter_admit(&launch, &ticket);   (may sleep)
 *         rc = <the real launch>;
 *         vgpu_limiter_done(&launch, &ticket, rc);
 *     }
 */
#ifndef HAMI_VGPU_LIMITER_H
#define HAMI_VGPU_LIMITER_H

#include "vgpu.h"

/* Credit the bucket can hold, in wall time: what a container may catch up on after it could
 * not launch (its own synchronisation, another container's work ahead of it in the queue).
 * Bounds the burst after idling to BURST * L / 100 of device time. */
#define VGPU_LIMITER_BURST_NS 30000000LL
/* A thread that finds the budget spent sleeps until this much credit exists again, so every
 * sleep lasts at least this long: at most 1 s / 15 ms = 67 timed wake-ups per second per
 * process (the target is 100), and 15 ms of credit at a time keeps the share smooth at 100 ms
 * resolution. */
#define VGPU_LIMITER_RESUME_NS 15000000LL
/* Length of the windows over which the achieved share is reported. */
#define VGPU_LIMITER_WINDOW_NS 1000000000LL

enum vgpu_launch_kind { LAUNCH_KERNEL, LAUNCH_KERNEL_EX, LAUNCH_COOPERATIVE, LAUNCH_GRAPH };

struct vgpu_launch {
    enum vgpu_launch_kind kind;
    int per_thread;          /* a _ptsz variant: stream 0 means the per-thread stream */
    CUstream stream;
    unsigned int grid[3];    /* blocks (0 for graphs) */
    unsigned int block[3];   /* threads per block (0 for graphs) */
    const void *code;        /* the CUfunction, or the CUgraphExec */
};

struct vgpu_sample;
struct vgpu_cost;

/* What admit decided, for done. */
struct vgpu_ticket {
    int rec;                    /* device record charged; -1: not limited */
    int64_t charged_ns;         /* device time charged */
    struct vgpu_sample *sample; /* measurement started, or NULL */
};

/* Non-zero when some device has an SM limit (0 < limit < 100) and the policy allows it. */
extern int vgpu_limiter_on;
/* Called once with the configuration, before any launch. */
void vgpu_limiter_init(const struct vgpu_config *cfg);
/* Before the real launch; may wait for budget. CUDA_SUCCESS to let the launch go. */
CUresult vgpu_limiter_admit(const struct vgpu_launch *launch, struct vgpu_ticket *ticket);
/* After the real launch answered `rc`. */
void vgpu_limiter_done(const struct vgpu_launch *launch, struct vgpu_ticket *ticket,
                       CUresult rc);

/* ---- bucket.c: the shared budget ---- */
/* Sleeps (one sleeping thread per process, the others queue behind it) until the container
 * has credit on this device; returns the time then. */
int64_t vgpu_bucket_wait(struct vgpu_compute *c, int64_t now);
/* Charges (or, negative, refunds) device time at `pct` percent for `launches` launches, and
 * adds it to the container's and this process's figures. */
void vgpu_bucket_charge(struct vgpu_compute *c, int64_t device_ns, uint32_t pct, int64_t now,
                        int launches);

/* ---- costs.c: estimates per signature ---- */
#define COST_SAMPLES 8
/* The signature of a launch on a device record. */
uint64_t vgpu_cost_key(const struct vgpu_launch *launch, int rec);
/* The entry of a signature (added when new, evicting the least recently used nearby). */
struct vgpu_cost *vgpu_cost_of(uint64_t key, int64_t now);
/* The estimate in ns, or -1 while the signature was never measured. */
int64_t vgpu_cost_estimate(const struct vgpu_cost *c);
/* Whether the signature's samples disagree (then every launch is measured). */
int vgpu_cost_variable(const struct vgpu_cost *c);
/* Counts a launch; whether it should be measured (unknown, variable, or its turn). */
int vgpu_cost_due(struct vgpu_cost *c, int64_t now);
/* The launches a measurement starting now stands for (since the last one), and resets it. */
uint32_t vgpu_cost_take_weight(struct vgpu_cost *c, int64_t now);
/* Adds a sample (as measured, and its own time without others' turns); updates the base,
 * the estimate (steady: the smallest recent own time; variable: the base) and the kind. */
void vgpu_cost_sample(struct vgpu_cost *c, int64_t measured, int64_t own);
/* The least a launch of the signature takes lately (see costs.c), -1 before a sample. */
int64_t vgpu_cost_base(const struct vgpu_cost *c);

/* ---- measure.c: timing events, per thread ---- */
/* Called for each finished measurement: what was charged, how many launches of the signature
 * it stands for (itself and those not measured since the previous one), what it measured. */
typedef void (*vgpu_measured_fn)(struct vgpu_cost *cost, int rec, int64_t charged_ns,
                                 uint32_t weight, int64_t measured_ns);
/* Reads back finished measurements of this thread without waiting. */
void vgpu_measure_drain(vgpu_measured_fn done, int64_t now);
/* Records the start event on the launch's stream; NULL when no measurement can start. */
struct vgpu_sample *vgpu_measure_begin(const struct vgpu_launch *launch, struct vgpu_cost *cost,
                                       int rec, int64_t charged_ns);
/* Records the end event after a successful launch, or abandons the measurement. */
void vgpu_measure_end(struct vgpu_sample *s, const struct vgpu_launch *launch, int launched);

/* ---- contention.c: own time versus others' time slices ---- */
/* Refreshes (at most every 100 ms) how many other contexts share the device of `rec`. */
void vgpu_contention_refresh(int rec, int64_t now);
/* Whether every one of a signature's latest samples exceeding its base by `excess_ns` means
 * that its cost grew rather than that others' turns came in between (under half a slice). */
int vgpu_contention_grew(int64_t excess_ns);
/* The limit in effect: `pct`, or less for a lower-priority container on a saturated device. */
uint32_t vgpu_priority_limit(uint32_t pct);
/* A measured event-pair time without the other contexts' turns it may contain, never below
 * `least_ns` (the signature's base; -1: unknown) nor above the measurement. */
int64_t vgpu_own_time(int64_t measured_ns, int64_t least_ns);
/* NVML's handle of the device of `rec` (NVML initialised once); -1 without NVML. */
int vgpu_nvml_device(int rec, nvmlDevice_t *dev);

/* ---- anchor.c: the charged share against the driver's per-process count ---- */
/* Charges the limit's budget on `rec` and counts it as this process's own charge. */
void vgpu_anchor_charge(int rec, int64_t device_ns, uint32_t pct, int64_t now, int launches);
/* This process's share of the device of `rec` lately by NVML's count, in ppm (-1 unknown),
 * also integrated into the device time the driver counted for it (at each refresh). */
int64_t vgpu_anchor_observe(int rec, nvmlDevice_t dev, int64_t now);
/* At most once a second per device: charges what the driver counted for this process above
 * what the limiter charged it over that second (see anchor.c). */
void vgpu_anchor_check(int rec, uint32_t pct, int64_t now);

/* ---- cu_capture.c: stream capture ---- */
/* Non-zero while some stream of this process may be capturing. */
int vgpu_capture_active(void);
/* Whether a launch on this stream would be captured instead of run (errors count as yes). */
int vgpu_stream_captures(CUstream stream, int per_thread);

#endif /* HAMI_VGPU_LIMITER_H */
