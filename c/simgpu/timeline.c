/* The shared device timeline: lanes of operations and the scheduler that plays them (the rules
 * are in timeline.h). Every function here runs under the state lock (sim_lock). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim.h"
#include "timeline.h"

static struct sim_tl_file *file;
static pthread_once_t map_once = PTHREAD_ONCE_INIT;
static int64_t slice_ns = SIM_TL_SLICE_NS;

/* "2ms", "500us", "2000000" (ns); 0 when malformed. */
static int64_t parse_duration(const char *text)
{
    char *end;
    long long v = strtoll(text, &end, 10);
    if (end == text || v <= 0)
        return 0;
    if (strcmp(end, "ms") == 0)
        return v * 1000000LL;
    if (strcmp(end, "us") == 0)
        return v * 1000LL;
    return (strcmp(end, "ns") == 0 || *end == '\0') ? v : 0;
}

static void map_once_fn(void)
{
    const char *slice = getenv("HAMI_SIM_TIMESLICE");
    if (slice && slice[0]) {
        slice_ns = parse_duration(slice);
        if (!slice_ns) {
            fprintf(stderr, "hami-sim: HAMI_SIM_TIMESLICE='%s' is not a duration like 2ms; "
                            "using 2ms\n", slice);
            slice_ns = SIM_TL_SLICE_NS;
        }
    }
    char path[PATH_MAX];
    sim_state_dir(path, sizeof path);
    size_t len = strlen(path);
    snprintf(path + len, sizeof path - len, "/%s", SIM_TL_FILE);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    if (fd < 0 || flock(fd, LOCK_EX) < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "hami-sim: cannot open %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    /* A file of another layout starts over from zeros (an all-zero timeline is empty). */
    if (st.st_size != (off_t)sizeof *file &&
        (ftruncate(fd, 0) < 0 || ftruncate(fd, sizeof *file) < 0))
        fprintf(stderr, "hami-sim: cannot size %s: %s\n", path, strerror(errno));
    void *m = mmap(NULL, sizeof *file, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    flock(fd, LOCK_UN);
    close(fd);
    file = m == MAP_FAILED ? NULL : m;
}

int64_t sim_tl_slice_ns(void)
{
    pthread_once(&map_once, map_once_fn);
    return slice_ns;
}

struct sim_tl_device *sim_tl(int dev)
{
    pthread_once(&map_once, map_once_fn);
    struct sim_device *d = sim_device(dev);
    return file && d ? &file->devices[d->index] : NULL;
}

static int empty(const struct sim_tl_lane *l) { return l->head == l->tail; }

static void free_lane(struct sim_tl_lane *l)
{
    uint32_t gen = l->gen + 1;
    memset(l, 0, offsetof(struct sim_tl_lane, done_at));
    l->gen = gen ? gen : 1;
}

/* Lanes of processes that are gone, and destroyed streams' lanes that drained, are freed. */
static void reap(struct sim_tl_device *t)
{
    for (uint32_t i = 0; i < t->lanes_used; i++) {
        struct sim_tl_lane *l = &t->lanes[i];
        if (l->pid && ((l->orphan && empty(l)) || (kill(l->pid, 0) < 0 && errno == ESRCH)))
            free_lane(l);
    }
}

int sim_tl_lane_locked(struct sim_tl_device *t, int *lane, uint32_t *gen, uint64_t tag,
                       int blocking)
{
    int32_t me = getpid();
    if (*gen && *lane >= 0 && *lane < SIM_TL_LANES && t->lanes[*lane].gen == *gen &&
        t->lanes[*lane].pid == me)
        return 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < SIM_TL_LANES; i++) {
            struct sim_tl_lane *l = &t->lanes[i];
            if (l->pid)
                continue;
            if (!l->gen)
                l->gen = 1;
            l->pid = me;
            l->tag = tag;
            l->blocking = blocking;
            l->head = l->tail = 0;
            if ((uint32_t)i >= t->lanes_used)
                t->lanes_used = (uint32_t)i + 1;
            *lane = i;
            *gen = l->gen;
            return 0;
        }
        reap(t);
    }
    return -1;
}

static struct sim_tl_op *head_op(struct sim_tl_lane *l) { return &l->ops[l->head % SIM_TL_OPS]; }

static void complete(struct sim_tl_lane *l, int64_t at)
{
    l->done_at[l->head % SIM_TL_DONE] = at;
    l->head++;
}

static int wait_met(const struct sim_tl_device *t, const struct sim_tl_op *op)
{
    const struct sim_tl_lane *w = &t->lanes[op->wait_lane];
    return w->gen != op->wait_gen || w->head >= op->wait_seq;
}

/* Whether the lane's first operation can make progress now (a met wait counts). */
static int ready(const struct sim_tl_device *t, struct sim_tl_lane *l)
{
    if (!l->pid || empty(l))
        return 0;
    const struct sim_tl_op *op = head_op(l);
    return op->kind != SIM_TL_WAIT || wait_met(t, op);
}

/* Completes the zero-time operations (events, met waits) at the heads of pid's lanes. */
static void settle(struct sim_tl_device *t, int32_t pid)
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t i = 0; i < t->lanes_used; i++) {
            struct sim_tl_lane *l = &t->lanes[i];
            while (l->pid == pid && ready(t, l) && head_op(l)->kind != SIM_TL_KERNEL) {
                complete(l, t->now);
                changed = 1;
            }
        }
    }
}

static int has_kernel(struct sim_tl_device *t, int32_t pid)
{
    for (uint32_t i = 0; i < t->lanes_used; i++) {
        struct sim_tl_lane *l = &t->lanes[i];
        if (l->pid == pid && ready(t, l) && head_op(l)->kind == SIM_TL_KERNEL)
            return 1;
    }
    return 0;
}

/* The next process after `cur` (round robin by pid) with something to do; 0: none. */
static int32_t next_pid(struct sim_tl_device *t, int32_t cur)
{
    int32_t after = 0, first = 0;
    for (uint32_t i = 0; i < t->lanes_used; i++) {
        struct sim_tl_lane *l = &t->lanes[i];
        if (l->pid == cur || !ready(t, l))
            continue;
        if (!first || l->pid < first)
            first = l->pid;
        if (l->pid > cur && (!after || l->pid < after))
            after = l->pid;
    }
    return after ? after : first;
}

/* Runs pid's kernels that fit together for up to `limit` ns (less when one ends first). */
static void run_kernels(int dev, struct sim_tl_device *t, int32_t pid, int64_t limit)
{
    struct sim_tl_lane *run[SIM_TL_LANES];
    int n = 0;
    uint32_t sms = sim_device(dev)->sms, used = 0;
    int64_t dt = limit;
    for (uint32_t i = 0; i < t->lanes_used; i++) {
        struct sim_tl_lane *l = &t->lanes[i];
        if (l->pid != pid || !ready(t, l) || head_op(l)->kind != SIM_TL_KERNEL)
            continue;
        struct sim_tl_op *op = head_op(l);
        if (n && used + op->sms > sms)
            continue; /* does not fit beside the kernels already running */
        used += op->sms;
        run[n++] = l;
        dt = op->ns < dt ? op->ns : dt;
    }
    if (dt > 0)
        sim_busy_add_locked(sim_device(dev), pid, t->now, t->now + dt);
    t->now += dt;
    for (int k = 0; k < n; k++) {
        struct sim_tl_op *op = head_op(run[k]);
        op->ns -= dt;
        if (op->ns <= 0)
            complete(run[k], t->now);
    }
}

void sim_tl_advance(int dev, struct sim_tl_device *t, int64_t to)
{
    if (t->now == 0 || t->now > to)
        t->now = to; /* a new file, or a clock that another boot started */
    for (;;) {
        int32_t pid = t->running;
        if (pid)
            settle(t, pid);
        int mine = pid && has_kernel(t, pid);
        int32_t other = next_pid(t, pid);
        if (!mine || (other && t->now >= t->slice_start + slice_ns)) {
            if (other) {
                t->running = other;
                t->slice_start = t->now;
                if (kill(other, 0) < 0 && errno == ESRCH)
                    reap(t); /* a process killed with work queued: its work goes with it */
                continue;
            }
            if (!mine) {
                t->running = 0;
                t->now = to > t->now ? to : t->now;
                return;
            }
        }
        if (t->now >= to)
            return;
        int64_t limit = to - t->now;
        if (other && t->slice_start + slice_ns - t->now < limit)
            limit = t->slice_start + slice_ns - t->now;
        run_kernels(dev, t, pid, limit);
    }
}

int64_t sim_tl_lower_bound_locked(const struct sim_tl_device *t, int lane, uint64_t seq)
{
    const struct sim_tl_lane *l = &t->lanes[lane];
    int64_t at = t->now;
    for (uint64_t s = l->head; s < seq && s < l->tail; s++) {
        const struct sim_tl_op *op = &l->ops[s % SIM_TL_OPS];
        if (op->kind == SIM_TL_KERNEL)
            at += op->ns;
    }
    return at;
}
