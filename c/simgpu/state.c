/* Opening the configuration and the shared state file, once per process. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hami_robust_mutex.h"
#include "mig.h"
#include "sim.h"

_Static_assert(sizeof(pthread_mutex_t) <= SIM_LOCK_BYTES, "mutex fits the lock field");

static pthread_once_t open_once = PTHREAD_ONCE_INIT;
static enum sim_status open_status = SIM_NO_STATE;
static struct sim_state *state;
static uint64_t ctx_overhead;  /* HAMI_SIM_CTX_OVERHEAD; 0: the model's default */
static int ctx_overhead_set;   /* HAMI_SIM_CTX_OVERHEAD given (0 included) */
static uint64_t module_memory = 8ULL << 20; /* HAMI_SIM_MODULE_MEM */
static int32_t pid_offset;     /* HAMI_SIM_PID_OFFSET */
static int view[SIM_MAX_DEVICES]; /* visible index -> device record (see SIM_MAX_RECORDS) */
static int view_count;

/* mkdir -p with mode 0700 for the directories it creates. */
static int make_dirs(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return (mkdir(buf, 0700) < 0 && errno != EEXIST) ? -1 : 0;
}

void sim_state_dir(char *out, size_t len)
{
    const char *dir = getenv("HAMI_SIM_STATE");
    if (dir && dir[0]) {
        snprintf(out, len, "%s", dir);
        return;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(out, len, "%s/hami-sim-%u", (tmp && tmp[0]) ? tmp : "/tmp", (unsigned)getuid());
}

/* Why an existing mapping cannot be used, or NULL when it can. */
static const char *mismatch(const struct sim_state *s, off_t size, const char *config)
{
    static char why[128];
    if (size != (off_t)sizeof(struct sim_state)) {
        snprintf(why, sizeof why, "has size %lld, expected %zu", (long long)size,
                 sizeof(struct sim_state));
        return why;
    }
    if (s->header.magic != SIM_STATE_MAGIC)
        return "has a bad magic number";
    if (s->header.version != SIM_STATE_VERSION) {
        snprintf(why, sizeof why, "is version %u, expected %u", s->header.version,
                 SIM_STATE_VERSION);
        return why;
    }
    if (s->header.header_size != sizeof(struct sim_header) ||
        s->header.device_size != sizeof(struct sim_device) ||
        s->header.total_size != sizeof(struct sim_state))
        return "has a different layout";
    if (strncmp(s->header.config, config, SIM_CONFIG_LEN) != 0)
        return "was built for another HAMI_SIM_GPUS / HAMI_SIM_UUID_SEED";
    return NULL;
}

/* Writes a fresh state file next to `path` and renames it over `path`. */
static int rebuild(const char *path, const struct sim_config *cfg, const char *config,
                   const char *seed)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.%d.new", path, (int)getpid());
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int rc = -1;
    if (ftruncate(fd, sizeof(struct sim_state)) == 0) {
        struct sim_state *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (s != MAP_FAILED) {
            s->header.version = SIM_STATE_VERSION;
            s->header.header_size = sizeof(struct sim_header);
            s->header.total_size = sizeof(struct sim_state);
            s->header.device_count = (uint32_t)cfg->count;
            s->header.device_size = sizeof(struct sim_device);
            memcpy(s->header.config, config, strnlen(config, SIM_CONFIG_LEN - 1));
            hami_robust_mutex_init(s->header.lock);
            for (int i = 0; i < cfg->count; i++)
                sim_device_identity(&s->devices[i], i, &cfg->gpus[i], seed);
            __atomic_store_n(&s->header.magic, SIM_STATE_MAGIC, __ATOMIC_RELEASE);
            munmap(s, sizeof *s);
            rc = rename(tmp, path);
        }
    }
    close(fd);
    if (rc < 0)
        unlink(tmp);
    return rc;
}

/* Maps the state file, replacing it when it does not match; serialised by flock, which the
 * kernel drops when a holder dies. */
static struct sim_state *map_state(const char *dir, const struct sim_config *cfg,
                                   const char *config, const char *seed)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, SIM_STATE_FILE) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    int lockfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lockfd < 0 || flock(lockfd, LOCK_EX) < 0) {
        if (lockfd >= 0)
            close(lockfd);
        return NULL;
    }
    struct sim_state *s = NULL;
    for (int attempt = 0; attempt < 2 && !s; attempt++) {
        int fd = open(path, O_RDWR | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0) {
            s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (s == MAP_FAILED)
                s = NULL;
            const char *why = s ? mismatch(s, st.st_size, config) : "cannot be mapped";
            if (why) {
                fprintf(stderr, "hami-sim: state file %s %s; rebuilding it\n", path, why);
                if (s)
                    munmap(s, sizeof *s);
                s = NULL;
            }
        }
        if (fd >= 0)
            close(fd);
        if (!s && attempt == 0 && rebuild(path, cfg, config, seed) < 0)
            break;
    }
    flock(lockfd, LOCK_UN);
    close(lockfd);
    return s;
}

/* What a visibility list may name: every GPU by its UUID, and every MIG device (compute
 * instance) by its MIG UUID. `records`: the device record each names, `parents` its GPU. */
#define SIM_MAX_NAMES (SIM_MAX_DEVICES + SIM_MAX_DEVICES * SIM_MIG_GIS * SIM_MIG_CIS)
static int names_locked(char **uuids, int *records, int *parents)
{
    int n = 0, count = (int)state->header.device_count;
    for (int i = 0; i < count; i++, n++) {
        uuids[n] = state->devices[i].uuid;
        records[n] = parents[n] = i;
    }
    for (int g = 0; g < count; g++)
        for (int i = 0; i < SIM_MIG_GIS; i++) {
            struct sim_mig_gi *gi = &state->mig[g].gis[i];
            for (int c = 0; gi->live && c < SIM_MIG_CIS; c++)
                if (gi->cis[c].live) {
                    uuids[n] = gi->cis[c].uuid;
                    records[n] = SIM_MAX_DEVICES + gi->record;
                    parents[n++] = g;
                }
        }
    return n;
}

/* Adds a record to the view unless it is there already (or the view is full). */
static void add_view(int record)
{
    for (int i = 0; i < view_count; i++)
        if (view[i] == record)
            return;
    if (view_count < SIM_MAX_DEVICES)
        view[view_count++] = record;
}

/* The records a named device stands for: NVML sees a MIG device's GPU (its MIG devices are
 * reached through it); CUDA sees a GPU in MIG mode as its instances, and a MIG device as its
 * GPU instance's record. */
static void map_name(int record, int parent)
{
    if (!sim_honours_cuda_visible) {
        add_view(parent);
        return;
    }
    if (record >= SIM_MAX_DEVICES) {
        add_view(record);
        return;
    }
    struct sim_mig_gpu *m = &state->mig[record];
    if (m->mode_current != SIM_MIG_ENABLE) {
        add_view(record);
        return;
    }
    for (int i = 0; i < SIM_MIG_GIS; i++)
        for (int c = 0; m->gis[i].live && c < SIM_MIG_CIS; c++)
            if (m->gis[i].cis[c].live) {
                add_view(SIM_MAX_DEVICES + m->gis[i].record);
                break;
            }
}

/* The devices this process sees (HAMI_SIM_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES). */
static int open_view(void)
{
    static char *uuids[SIM_MAX_NAMES];
    static int records[SIM_MAX_NAMES], parents[SIM_MAX_NAMES], picked[SIM_MAX_NAMES];
    char err[256];
    const char *container = getenv("HAMI_SIM_VISIBLE_DEVICES");
    sim_lock();
    int n = names_locked(uuids, records, parents);
    int m = sim_visible_view(container, NULL, uuids, n, picked, err, sizeof err);
    view_count = 0;
    for (int i = 0; i < m; i++)
        map_name(records[picked[i]], parents[picked[i]]);
    sim_unlock();
    if (m < 0) {
        fprintf(stderr, "hami-sim: HAMI_SIM_VISIBLE_DEVICES='%s': %s\n", container, err);
        return view_count = -1;
    }
    const char *cuda = sim_honours_cuda_visible ? getenv("CUDA_VISIBLE_DEVICES") : NULL;
    if (!cuda)
        return view_count;
    char *names[SIM_MAX_DEVICES];
    int inner[SIM_MAX_DEVICES], outer[SIM_MAX_DEVICES];
    for (int i = 0; i < view_count; i++)
        names[i] = sim_device_record(view[i])->uuid;
    int k = sim_visible_view(NULL, cuda, names, view_count, inner, err, sizeof err);
    for (int i = 0; i < k; i++)
        outer[i] = view[inner[i]];
    memcpy(view, outer, (size_t)(k > 0 ? k : 0) * sizeof *view);
    return view_count = k < 0 ? 0 : k;
}

/* A size variable: 0 when unset; "0" means zero. -1 (reported) when malformed. */
static int size_knob(const char *name, const char *text, uint64_t *out, int *set)
{
    if (!text || !text[0])
        return 0;
    *set = 1;
    *out = strcmp(text, "0") == 0 ? 0 : sim_parse_size(text);
    if (strcmp(text, "0") != 0 && !*out) {
        fprintf(stderr, "hami-sim: %s='%s' is not a size like 300m\n", name, text);
        return -1;
    }
    return 0;
}

static int parse_memory_knobs(const char *overhead)
{
    int unused = 0;
    const char *offset = getenv("HAMI_SIM_PID_OFFSET");
    if (size_knob("HAMI_SIM_CTX_OVERHEAD", overhead, &ctx_overhead, &ctx_overhead_set) < 0 ||
        size_knob("HAMI_SIM_MODULE_MEM", getenv("HAMI_SIM_MODULE_MEM"), &module_memory,
                  &unused) < 0)
        return -1;
    if (offset && offset[0]) {
        char *end = NULL;
        long v = strtol(offset, &end, 10);
        if (*end || v < 0 || v > (1L << 30)) {
            fprintf(stderr, "hami-sim: HAMI_SIM_PID_OFFSET='%s' is not a number of pids\n",
                    offset);
            return -1;
        }
        pid_offset = (int32_t)v;
    }
    return 0;
}

static void open_once_fn(void)
{
    char err[256];
    const char *gpus = getenv("HAMI_SIM_GPUS");
    const char *seed = getenv("HAMI_SIM_UUID_SEED");
    const char *overhead = getenv("HAMI_SIM_CTX_OVERHEAD");
    static struct sim_config cfg;
    if (!gpus || !gpus[0])
        gpus = SIM_DEFAULT_GPUS;
    if (sim_config_parse(gpus, &cfg, err, sizeof err) < 0) {
        fprintf(stderr, "hami-sim: HAMI_SIM_GPUS='%s': %s\n", gpus, err);
        open_status = SIM_BAD_CONFIG;
        return;
    }
    if (parse_memory_knobs(overhead) < 0) {
        open_status = SIM_BAD_CONFIG;
        return;
    }
    char dir[PATH_MAX], config[SIM_CONFIG_LEN];
    sim_state_dir(dir, sizeof dir);
    /* Longer texts are cut: two configurations differing only past 1 KiB share a file. */
    if (snprintf(config, sizeof config, "gpus=%s;seed=%s", gpus, seed ? seed : "") >=
        (int)sizeof config)
        config[sizeof config - 1] = '\0';
    if (make_dirs(dir) < 0 || !(state = map_state(dir, &cfg, config, seed))) {
        fprintf(stderr, "hami-sim: cannot use state directory %s (HAMI_SIM_STATE): %s\n", dir,
                strerror(errno));
        open_status = SIM_NO_STATE;
        return;
    }
    if (open_view() < 0) {
        open_status = SIM_BAD_CONFIG;
        return;
    }
    sim_slots_init();
    open_status = SIM_READY;
}

enum sim_status sim_open(void)
{
    pthread_once(&open_once, open_once_fn);
    return open_status;
}

int sim_device_count(void) { return sim_open() == SIM_READY ? view_count : 0; }

struct sim_device *sim_device_record(int record)
{
    if (!state || record < 0 || record >= SIM_MAX_RECORDS)
        return NULL;
    return record < SIM_MAX_DEVICES ? &state->devices[record]
                                    : &state->mig_records[record - SIM_MAX_DEVICES];
}

struct sim_state *sim_state_map(void) { return sim_open() == SIM_READY ? state : NULL; }

struct sim_device *sim_device(int index)
{
    if (sim_open() != SIM_READY || index < 0 || index >= view_count)
        return NULL;
    return sim_device_record(view[index]);
}

/* What users of GPU-sharing systems report for a CUDA 12 context with lazy loading (driver
 * state, local memory for the resident threads' stacks, the 8 MiB malloc heap, the printf
 * FIFO): an observation, not a constant, hence HAMI_SIM_CTX_OVERHEAD. */
static uint64_t model_overhead(const char *name)
{
    if (strstr(name, "H100") || strstr(name, "H200") || strstr(name, "H800") ||
        strstr(name, "B200") || strstr(name, "GH200"))
        return 520ULL << 20;
    if (strstr(name, "A100") || strstr(name, "A800") || strstr(name, "A30"))
        return 430ULL << 20;
    return 300ULL << 20; /* smaller GPUs: fewer SMs, less local memory */
}

uint64_t sim_ctx_overhead(int dev)
{
    const struct sim_device *d = sim_device(dev);
    if (ctx_overhead_set || !d)
        return ctx_overhead;
    return model_overhead(d->name);
}

uint64_t sim_module_memory(void) { return module_memory; }
int32_t sim_host_pid_offset(void) { return pid_offset; }

void sim_lock(void)
{
    pthread_mutex_t *m = (pthread_mutex_t *)(void *)state->header.lock;
    /* The previous holder died mid-update; every field stays valid (see sim_state.h). */
    if (pthread_mutex_lock(m) == EOWNERDEAD)
        pthread_mutex_consistent(m);
}

int sim_trylock(void)
{
    int rc = pthread_mutex_trylock((pthread_mutex_t *)(void *)state->header.lock);
    if (rc == EOWNERDEAD)
        pthread_mutex_consistent((pthread_mutex_t *)(void *)state->header.lock);
    return rc == 0 || rc == EOWNERDEAD ? 0 : -1;
}

void sim_unlock(void) { pthread_mutex_unlock((pthread_mutex_t *)(void *)state->header.lock); }

int64_t sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void sim_sleep_until(int64_t t_ns)
{
    struct timespec ts = {.tv_sec = t_ns / 1000000000LL, .tv_nsec = t_ns % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}
