/* The container's shared accounting file: the one place its format is defined.
 *
 * One file per container (CUDA_DEVICE_MEMORY_SHARED_CACHE), mapped MAP_SHARED by every process
 * of the container that loads libvgpu.so. Fixed-width little-endian fields, reserved space in
 * every record; the Python mirror (hami_node/shim/layout.py) repeats this layout and both sides
 * assert the numbers at the end of this file (C at compile time, Python in tests/shim).
 *
 * Records
 *   header   identity (magic, version, sizes), the lock, the time of the last liveness sweep.
 *   devices  one record per GPU the container uses, keyed by UUID (so CUDA ordinals, NVML
 *            indices and CUDA_VISIBLE_DEVICES differences between processes all agree):
 *            physical total, limit, used (derived), peak, SM limit, refusals.
 *   procs    one slot per live process: pid + start time (identity that survives pid reuse)
 *            and the bytes it holds on each device record. THE SLOTS ARE THE TRUTH: a device's
 *            used_bytes always equals the sum of the slots' used[] for it.
 *
 * Locking: `lock` is a process-shared ROBUST pthread mutex. Every update of used/peak/slots is
 * one short critical section (no system calls inside). A holder killed at any instant leaves the
 * mutex EOWNERDEAD: the next locker recomputes every device's used_bytes from the slots (each
 * slot word is written with one aligned 64-bit store, so it is either old or new) and marks the
 * mutex consistent; the dead process's slot is then reaped like any dead process's.
 * Liveness: a slot whose pid is gone, a zombie, or whose start time differs is dead; the sweep
 * runs before any refusal and at most every VGPU_REAP_INTERVAL_NS otherwise.
 * Lifetime: every process keeps a shared flock (LOCK_SH) on the file while it runs. A file that
 * is truncated, corrupt or of another version is rebuilt only by a process that gets LOCK_EX,
 * i.e. when no live process uses it; otherwise the shim refuses to start (fails closed).
 *
 * Compute limiter (c/vgpu/limiter.h): vgpu_device.compute holds the container's budget for that
 * GPU (a token bucket kept as one "theoretical arrival time", updated with compare-and-swap, so
 * no process ever holds a lock on it) and the figures hami-smi shows; vgpu_proc.compute holds
 * one process's figures. They live in what version 1 reserved for them, where all zero means
 * "never used", so files written before the limiter existed are valid as they are.
 *
 * Reserved for later features (zero in version 1 files; zero must mean "unset"):
 *   vgpu_header.reserved, vgpu_device.reserved, vgpu_compute.reserved, vgpu_proc.reserved.
 * A change that cannot live in those bytes bumps VGPU_VERSION: old files are then rebuilt when
 * unused, or refused with one line while an old process still uses them.
 */
#ifndef HAMI_VGPU_SHARED_H
#define HAMI_VGPU_SHARED_H

#include <stddef.h>
#include <stdint.h>

#define VGPU_MAGIC 0x31504756494d4148ULL /* "HAMIVGP1" read as little-endian bytes */
#define VGPU_VERSION 1

#define VGPU_MAX_DEVICES 16
#define VGPU_MAX_PROCS 1024
#define VGPU_UUID_LEN 48
#define VGPU_LOCK_BYTES 64
#define VGPU_REAP_INTERVAL_NS 100000000LL /* liveness sweeps read /proc: at most every 100 ms */

/* GPU_CORE_UTILIZATION_POLICY */
enum vgpu_policy { VGPU_POLICY_DEFAULT = 0, VGPU_POLICY_FORCE = 1, VGPU_POLICY_DISABLE = 2 };

/* Compute figures, kept per process (written only by that process) and per device record (by
 * every process of the container, with atomics). A "window" is about one second of wall time:
 * share_ppm is the device time charged in the last complete window over its length. 64 bytes.
 * A process's figures are zeroed when it claims its slot. */
struct vgpu_compute_figures {
    uint64_t charged_ns;        /* device time charged to the budget */
    uint64_t launches;          /* launches admitted by the limiter */
    uint64_t waits;             /* timed sleeps for budget (wake-ups) */
    uint64_t waited_ns;         /* wall time spent in them */
    int64_t window_start_ns;    /* CLOCK_MONOTONIC start of the window being filled */
    uint64_t window_charged_ns; /* device time charged in that window */
    int64_t share_at_ns;        /* when share_ppm was computed (end of the last window) */
    uint32_t share_ppm;         /* charged device time / wall time of the last window, x 1e6 */
    uint32_t window_ms;         /* length of the last window */
};

/* The container's compute budget on one GPU, and its figures. 256 bytes.
 * The budget is GCRA (a token bucket expressed in time): `tat_ns` is the wall-clock instant
 * (CLOCK_MONOTONIC) at which all device time charged so far is paid for at the limit's rate;
 * a charge of c ns of device time moves it by c * 100 / limit. Launches may start while
 * tat_ns <= now; the bucket holds a small burst of credit (limiter.h). 0: never used. */
struct vgpu_compute {
    int64_t tat_ns;
    struct vgpu_compute_figures figures;
    uint8_t reserved[184];
};

/* One process of the container. pid 0 marks a free slot. 256 bytes. */
struct vgpu_proc {
    int32_t pid;
    int32_t priority;                /* CUDA_TASK_PRIORITY (0 highest) */
    uint64_t start_time;             /* field 22 of /proc/<pid>/stat: guards against pid reuse */
    uint64_t used[VGPU_MAX_DEVICES]; /* bytes held on each device record */
    struct vgpu_compute_figures compute;
    uint8_t reserved[44];
    int32_t host_pid; /* the PID the driver (NVML) names this process by; 0: not known */
};

/* One GPU the container uses. An empty uuid marks a free record. 512 bytes. */
struct vgpu_device {
    char uuid[VGPU_UUID_LEN]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    uint64_t total_bytes;     /* physical memory of the device */
    uint64_t limit_bytes;     /* the container's limit; 0: none */
    uint64_t used_bytes;      /* sum of the slots' used[] for this record */
    uint64_t peak_bytes;      /* high-water mark of used_bytes */
    uint64_t refusals;        /* allocations refused at the limit */
    uint32_t sm_limit;        /* CUDA_DEVICE_SM_LIMIT percent; 0: none */
    uint32_t flags;           /* reserved, 0 */
    uint8_t reserved[152];
    uint64_t ctx_estimate;    /* what the driver charged the container's last new context */
    struct vgpu_compute compute; /* the compute limiter's budget for this GPU */
};

/* 512 bytes. `magic` is written last when a file is built, so a reader that sees the magic
 * sees a complete file. */
struct vgpu_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint64_t total_size;
    uint32_t device_size;
    uint32_t proc_size;
    uint32_t max_devices;
    uint32_t max_procs;
    int64_t last_reap_ns; /* CLOCK_MONOTONIC time of the last liveness sweep */
    int32_t policy;       /* enum vgpu_policy, from the process that built the file */
    uint32_t flags;       /* reserved, 0 */
    uint64_t reserved0;
    uint8_t lock[VGPU_LOCK_BYTES]; /* pthread_mutex_t: robust, process-shared */
    uint8_t reserved[384];
};

struct vgpu_shared {
    struct vgpu_header header;
    struct vgpu_device devices[VGPU_MAX_DEVICES];
    struct vgpu_proc procs[VGPU_MAX_PROCS];
};

/* The numbers the Python mirror asserts too. */
_Static_assert(sizeof(struct vgpu_proc) == 256, "vgpu_proc size");
_Static_assert(offsetof(struct vgpu_proc, used) == 16, "vgpu_proc.used offset");
_Static_assert(sizeof(struct vgpu_compute_figures) == 64, "vgpu_compute_figures size");
_Static_assert(offsetof(struct vgpu_compute_figures, share_ppm) == 56, "share_ppm offset");
_Static_assert(sizeof(struct vgpu_compute) == 256, "vgpu_compute size");
_Static_assert(offsetof(struct vgpu_compute, figures) == 8, "vgpu_compute.figures offset");
_Static_assert(offsetof(struct vgpu_proc, compute) == 144, "vgpu_proc.compute offset");
_Static_assert(sizeof(struct vgpu_device) == 512, "vgpu_device size");
_Static_assert(offsetof(struct vgpu_device, used_bytes) == 64, "vgpu_device.used_bytes offset");
_Static_assert(offsetof(struct vgpu_device, sm_limit) == 88, "vgpu_device.sm_limit offset");
_Static_assert(offsetof(struct vgpu_device, compute) == 256, "vgpu_device.compute offset");
_Static_assert(offsetof(struct vgpu_header, lock) == 64, "vgpu_header.lock offset");
_Static_assert(sizeof(struct vgpu_header) == 512, "vgpu_header size");
_Static_assert(offsetof(struct vgpu_shared, devices) == 512, "devices offset");
_Static_assert(offsetof(struct vgpu_shared, procs) == 512 + 16 * 512, "procs offset");
_Static_assert(sizeof(struct vgpu_shared) == 512 + 16 * 512 + 1024 * 256, "file size");

#endif /* HAMI_VGPU_SHARED_H */
