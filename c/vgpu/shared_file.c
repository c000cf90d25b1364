/* Mapping the container's shared file (layout: vgpu_shared.h) without serialising start-up.
 *
 * A new file is built complete under a temporary name and link()ed into place, so no process
 * ever maps a half-built file and two creators cannot both win. Every user then holds a shared
 * flock for its whole life: opening costs one open + flock(LOCK_SH) + fstat + mmap, and shared
 * locks never wait for each other. A bad file (truncated, corrupt, another version) is rebuilt
 * in place only by a process that obtains LOCK_EX, which the kernel grants only when no live
 * process holds the file; otherwise the shim refuses to start rather than split the accounting.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hami_robust_mutex.h"
#include "vgpu.h"

_Static_assert(sizeof(pthread_mutex_t) <= VGPU_LOCK_BYTES, "mutex fits the lock field");

#define OPEN_ATTEMPTS 50            /* x 10 ms: how long to wait for another rebuilder */
#define FILE_SIZE sizeof(struct vgpu_shared)
#define REFUSAL "; every CUDA call of this process fails"

static int held_fd = -1; /* keeps this process's shared flock for its whole life */

/* mkdir -p of the folder holding `path`. */
static int make_parent_dirs(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf)
        return 0;
    *slash = '\0';
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return (mkdir(buf, mode) < 0 && errno != EEXIST) ? -1 : 0;
}

static void init_layout(struct vgpu_shared *s, int policy)
{
    memset(s, 0, sizeof *s);
    s->header.version = VGPU_VERSION;
    s->header.header_size = sizeof(struct vgpu_header);
    s->header.total_size = sizeof(struct vgpu_shared);
    s->header.device_size = sizeof(struct vgpu_device);
    s->header.proc_size = sizeof(struct vgpu_proc);
    s->header.max_devices = VGPU_MAX_DEVICES;
    s->header.max_procs = VGPU_MAX_PROCS;
    s->header.policy = policy;
    hami_robust_mutex_init(s->header.lock);
    __atomic_store_n(&s->header.magic, VGPU_MAGIC, __ATOMIC_RELEASE);
}

/* Why a file cannot be used as it is, or NULL when it can. */
static const char *why_bad(const struct vgpu_shared *s, off_t size)
{
    static __thread char why[160];
    if (size != (off_t)FILE_SIZE) {
        snprintf(why, sizeof why, "has size %lld, expected %zu (truncated or another layout)",
                 (long long)size, FILE_SIZE);
        return why;
    }
    const struct vgpu_header *h = &s->header;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != VGPU_MAGIC)
        return "has a bad magic number (not a hami-vgpu file, or corrupt)";
    if (h->version != VGPU_VERSION) {
        snprintf(why, sizeof why, "is version %u, this shim uses version %u", h->version,
                 VGPU_VERSION);
        return why;
    }
    if (h->header_size != sizeof(struct vgpu_header) || h->total_size != FILE_SIZE ||
        h->device_size != sizeof(struct vgpu_device) || h->proc_size != sizeof(struct vgpu_proc) ||
        h->max_devices != VGPU_MAX_DEVICES || h->max_procs != VGPU_MAX_PROCS)
        return "has a corrupt header (sizes do not match version 1)";
    return NULL;
}

/* Maps the file behind `fd` if it is usable; else NULL with *why set. */
static struct vgpu_shared *map_checked(int fd, const char **why)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        *why = strerror(errno);
        return NULL;
    }
    if (st.st_size != (off_t)FILE_SIZE) {
        *why = st.st_size == 0 ? NULL : why_bad(NULL, st.st_size);
        return NULL;
    }
    struct vgpu_shared *s = mmap(NULL, FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED) {
        *why = strerror(errno);
        return NULL;
    }
    if ((*why = why_bad(s, st.st_size)) != NULL) {
        munmap(s, FILE_SIZE);
        return NULL;
    }
    return s;
}

/* Builds a complete file under a temporary name and links it into place (EEXIST: another
 * process won, equally fine). */
static int create_fresh(const char *path, int mode, int policy)
{
    char tmp[PATH_MAX + 64];
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(tmp, sizeof tmp, "%s.%d.%ld.new", path, (int)getpid(), (long)ts.tv_nsec);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int rc = -1;
    if (fchmod(fd, (mode_t)mode) == 0 && ftruncate(fd, FILE_SIZE) == 0) {
        struct vgpu_shared *s = mmap(NULL, FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (s != MAP_FAILED) {
            init_layout(s, policy);
            munmap(s, FILE_SIZE);
            rc = (link(tmp, path) == 0 || errno == EEXIST) ? 0 : -1;
        }
    }
    int saved = errno;
    close(fd);
    unlink(tmp);
    errno = saved;
    return rc;
}

/* With LOCK_EX held (no live user): rebuilds the file behind `fd` in place. */
static struct vgpu_shared *rebuild_locked(int fd, int policy)
{
    if (ftruncate(fd, 0) < 0 || ftruncate(fd, FILE_SIZE) < 0)
        return NULL;
    struct vgpu_shared *s = mmap(NULL, FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED)
        return NULL;
    init_layout(s, policy);
    return s;
}

/* One attempt on an open file: 1 mapped, 0 retry later, -1 give up. *why says what was wrong
 * with the file (NULL: nothing, or just empty). */
static int try_file(int fd, int policy, const char **why, struct vgpu_shared **out)
{
    if (flock(fd, LOCK_SH) < 0)
        return -1;
    if ((*out = map_checked(fd, why)) != NULL)
        return 1;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0)
        return 0; /* live users (or another rebuilder): look again shortly */
    const char *again = NULL;
    if ((*out = map_checked(fd, &again)) == NULL) /* nobody fixed it meanwhile */
        *out = rebuild_locked(fd, policy);
    flock(fd, LOCK_SH);
    return *out ? 1 : -1;
}

struct vgpu_shared *vgpu_shared_open(const char *path, int mode, int policy)
{
    const char *why = NULL;
    for (int attempt = 0; attempt < OPEN_ATTEMPTS; attempt++) {
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT) { /* the first process of the container */
            if (make_parent_dirs(path, mode == 0600 ? 0700 : 0755) < 0) {
                vgpu_log(VGPU_LOG_ERROR, "cannot create the folder of %s: %s" REFUSAL, path,
                         strerror(errno));
                return NULL;
            }
            if (create_fresh(path, mode, policy) < 0) {
                vgpu_log(VGPU_LOG_ERROR, "cannot create %s: %s" REFUSAL, path, strerror(errno));
                return NULL;
            }
            continue;
        }
        if (fd < 0) {
            vgpu_log(VGPU_LOG_ERROR, "cannot open %s: %s" REFUSAL, path, strerror(errno));
            return NULL;
        }
        struct vgpu_shared *s = NULL;
        const char *problem = NULL;
        int rc = try_file(fd, policy, &problem, &s);
        why = problem ? problem : why;
        if (rc == 1) {
            held_fd = fd;
            if (why)
                vgpu_log(VGPU_LOG_ERROR, "shared file %s %s; rebuilt it, as no live process "
                         "was using it", path, why);
            return s;
        }
        close(fd);
        if (rc < 0)
            break;
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    vgpu_log(VGPU_LOG_ERROR, "shared file %s %s; it cannot be rebuilt while live processes use "
             "it: stop them, or set CUDA_DEVICE_MEMORY_SHARED_CACHE to a new path" REFUSAL, path,
             why ? why : "is unusable");
    return NULL;
}
