/* The device timeline (timeline.c): what runs on a simulated GPU when, shared by every process.
 *
 * Each stream of each process owns a lane: a queue of operations (kernels, event records,
 * waits on another lane) in a shared file next to the state file, $HAMI_SIM_STATE/
 * timeline.state. Nothing runs in the background: whoever calls into the driver first plays
 * the device forward to the present (sim_tl_advance, under the state lock), so the history is
 * the same whoever computes it. The rules, from the "Time on the device" rows of
 * shared/reference/driver-semantics.md:
 *   - kernels of different processes never run at once: the device runs one process at a
 *     time and switches to the next process with work when the running one has nothing left
 *     to run, or after HAMI_SIM_TIMESLICE (default 2 ms) when another one waits;
 *   - within the running process, the first kernels of its lanes run together while their
 *     blocks fit in the SMs (in lane order; a kernel wider than the device runs alone);
 *   - an event is stamped when its lane reaches it while its process holds the device, so an
 *     event pair brackets waiting and other processes' time slices too.
 * Kernel durations stay what their argument says (times the number of waves).
 */
#ifndef HAMI_SIM_TIMELINE_H
#define HAMI_SIM_TIMELINE_H

#include <stdint.h>

#define SIM_TL_FILE "timeline.state"
#define SIM_TL_LANES 128   /* streams per device with work queued, all processes together */
#define SIM_TL_OPS 512     /* operations queued per lane; a launch past this waits, as on a GPU */
#define SIM_TL_DONE 512    /* completion times kept per lane, for events read late */
#define SIM_TL_SLICE_NS 2000000LL

enum sim_tl_kind { SIM_TL_KERNEL = 1, SIM_TL_EVENT = 2, SIM_TL_WAIT = 3 };

struct sim_tl_op {
    int64_t ns;         /* kernel: device time left */
    int32_t kind;
    uint32_t sms;       /* kernel: SMs it occupies */
    uint64_t wait_seq;  /* wait: until lane wait_lane has completed this many operations */
    int32_t wait_lane;
    uint32_t wait_gen;
};

struct sim_tl_lane {
    int32_t pid;        /* owner; 0: free */
    uint32_t gen;       /* bumped when the lane is freed: stale handles see a new gen */
    uint64_t tag;       /* the owner's context, for the legacy stream's implicit waits */
    int32_t blocking;   /* synchronises with the legacy stream */
    int32_t orphan;     /* its stream was destroyed: freed once empty */
    uint64_t head, tail; /* operations completed / queued so far */
    int64_t done_at[SIM_TL_DONE];
    struct sim_tl_op ops[SIM_TL_OPS];
};

struct sim_tl_device {
    int64_t now;          /* played up to here */
    int64_t slice_start;  /* when `running` got the device */
    int32_t running;      /* pid holding the device; 0: idle */
    uint32_t lanes_used;  /* lanes [0, lanes_used) may be in use */
    struct sim_tl_lane lanes[SIM_TL_LANES];
};

struct sim_tl_file {
    struct sim_tl_device devices[SIM_MAX_RECORDS]; /* by device record: GPU instances too */
};

/* The device's timeline (mapping the file on first use); NULL when it cannot be mapped. */
struct sim_tl_device *sim_tl(int dev);
/* Plays the device forward to `to`; caller holds the state lock. */
void sim_tl_advance(int dev, struct sim_tl_device *t, int64_t to);
/* A lane of this process for a stream (by handle: lane index and generation); -1 if none. */
int sim_tl_lane_locked(struct sim_tl_device *t, int *lane, uint32_t *gen, uint64_t tag,
                       int blocking);
/* Earliest time operation `seq` of a lane can complete (its own queue ahead of it only). */
int64_t sim_tl_lower_bound_locked(const struct sim_tl_device *t, int lane, uint64_t seq);
/* The time slice between processes, HAMI_SIM_TIMESLICE ("2ms", "500us", ns). */
int64_t sim_tl_slice_ns(void);

#endif /* HAMI_SIM_TIMELINE_H */
