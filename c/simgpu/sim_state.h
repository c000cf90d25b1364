/* Layout of the simulated GPUs' shared state: one file, $HAMI_SIM_STATE/gpus.state, mapped
 * MAP_SHARED by every process that loads the simulated libcuda or libnvidia-ml.
 *
 * Fixed-width fields only, little-endian x86-64/aarch64, reserved space at the end of every
 * record so a later version can grow without moving anything. The Python mirror
 * (hami_sim/gpu/state.py) repeats this layout; both sides assert the sizes and offsets below
 * (the C side at compile time here, the Python side in tests/sim/test_state_layout.py).
 *
 * Locking: `lock` is a process-shared robust pthread mutex guarding every mutable field. A
 * process killed while holding it leaves it EOWNERDEAD; the next locker marks it consistent
 * and recomputes nothing, because every update is written so that a torn one is harmless
 * (counters are per-process slots; the device total is their sum).
 *
 * A file whose magic, version, size or configuration does not match is replaced (a new file
 * renamed over the old one), never repaired in place: processes still mapping the old inode
 * keep running undisturbed.
 */
#ifndef HAMI_SIM_STATE_H
#define HAMI_SIM_STATE_H

#include <stddef.h>
#include <stdint.h>

#define SIM_STATE_MAGIC 0x314d4953494d4148ULL /* "HAMISIM1" read as little-endian bytes */
#define SIM_STATE_VERSION 4
#define SIM_STATE_FILE "gpus.state"

#define SIM_MAX_DEVICES 16
#define SIM_MAX_PROCS 64   /* processes per device */
#define SIM_BUSY_RING 1024 /* busy intervals per device, for utilization */
#define SIM_XID_RING 64    /* XID events per device */
#define SIM_BUSY_BINS 256  /* busy time per 10 ms bin, for NVML's utilization */
#define SIM_BUSY_BIN_NS 10000000LL
#define SIM_NAME_LEN 96
#define SIM_UUID_LEN 48
#define SIM_CONFIG_LEN 1024
#define SIM_LOCK_BYTES 64
#define SIM_MIG_GIS 7      /* GPU instances per GPU: 7 on every MIG-capable model simulated */
#define SIM_MIG_CIS 7      /* compute instances per GPU instance */
#define SIM_MIG_RECORDS 24 /* device records for GPU instances, shared by the node's GPUs */
#define SIM_MAX_HOLDS 1024 /* (process, shared allocation) pairs: exported memory's holders */
/* Device records: the physical GPUs, then the GPU instances' (index SIM_MAX_DEVICES + slot). */
#define SIM_MAX_RECORDS (SIM_MAX_DEVICES + SIM_MIG_RECORDS)

/* One process using one device. pid 0 marks a free slot. */
struct sim_proc {
    int32_t pid;
    uint32_t contexts;   /* live contexts of this process on this device */
    uint64_t start_time; /* field 22 of /proc/<pid>/stat: guards against pid reuse */
    uint64_t used_bytes; /* device memory this process holds (allocations, pools, ctx) */
    uint64_t pidns;      /* its PID namespace (/proc/self/ns/pid inode): pid is within it */
    uint64_t reserved[3];
    int32_t host_pid; /* the pid NVML reports: pid + HAMI_SIM_PID_OFFSET of the process */
    uint32_t reserved2;
};

/* Time the device was busy with one process's kernels, CLOCK_MONOTONIC nanoseconds. */
struct sim_busy {
    int64_t start_ns;
    int64_t end_ns;
    int32_t pid;
    uint32_t reserved;
};

/* One injected XID error; `seq` counts from 1 per device. */
struct sim_xid {
    uint64_t seq;
    uint64_t xid;
    int64_t time_ns;
    uint64_t reserved;
};

/* Busy time in fixed time bins (2.56 s of history), device-wide and per process slot: what
 * NVML's utilization reads, whatever the number of kernels (the ring of intervals above is the
 * detailed record hami_sim's BusyRecorder polls; at 2,500 kernels a second it covers less than
 * a second). Slot i holds bin number bin[i] (CLOCK_MONOTONIC ns / SIM_BUSY_BIN_NS); a slot
 * holding an older bin is reset before it is reused. */
struct sim_busy_bins {
    int64_t bin[SIM_BUSY_BINS];
    uint32_t device_ns[SIM_BUSY_BINS];
    uint32_t proc_ns[SIM_MAX_PROCS][SIM_BUSY_BINS]; /* by slot of procs[] */
};

struct sim_device {
    uint64_t total_bytes;
    uint32_t index;
    uint32_t sms;
    char name[SIM_NAME_LEN];
    char uuid[SIM_UUID_LEN]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    int32_t cc_major;
    int32_t cc_minor;
    uint32_t pci_bus;
    int32_t numa_node;
    int64_t busy_until_ns; /* end of the last kernel queued on the device timeline */
    uint64_t busy_count;   /* intervals ever written; the newest is busy[(count-1) % RING] */
    uint64_t xid_count;    /* XIDs ever injected; the newest is xids[(count-1) % RING] */
    uint8_t reserved[248];
    struct sim_proc procs[SIM_MAX_PROCS];
    struct sim_busy busy[SIM_BUSY_RING];
    struct sim_xid xids[SIM_XID_RING];
    struct sim_busy_bins bins;
};

/* MIG (version 3). A GPU instance owns a device record of its own (`record`, an index into
 * sim_state.mig_records): its memory, its processes and its timeline, so instances are
 * isolated from each other and from the parent's ledger as on real hardware. A compute
 * instance is a MIG device with its own UUID; CUDA sees the GPU instance's record through it. */
struct sim_mig_ci {
    uint32_t live;
    uint32_t id;         /* unique within its GPU instance */
    uint32_t profile_id; /* NVML_COMPUTE_INSTANCE_PROFILE_* */
    uint32_t start;      /* placement in compute slices of the GPU instance */
    uint32_t size;
    uint32_t sms;
    char uuid[SIM_UUID_LEN]; /* "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    uint8_t reserved[8];
};

struct sim_mig_gi {
    uint32_t live;
    uint32_t id;         /* unique within the GPU */
    uint32_t profile_id; /* the profile's unique id (19 = 1g.5gb on an A100, ...) */
    uint32_t start;      /* placement in memory slices */
    uint32_t size;
    int32_t record;      /* index into mig_records */
    uint64_t memory_bytes;
    uint32_t sms;
    uint32_t compute_slices;
    uint64_t reserved[2];
    struct sim_mig_ci cis[SIM_MIG_CIS];
};

struct sim_mig_gpu {
    uint32_t mode_current; /* NVML_DEVICE_MIG_DISABLE / ENABLE */
    uint32_t mode_pending; /* differs from current while processes hold the GPU */
    uint64_t serial;       /* instances ever created on this GPU: fresh UUIDs */
    uint64_t reserved[6];
    struct sim_mig_gi gis[SIM_MIG_GIS];
};

struct sim_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint64_t total_size;
    uint32_t device_count;
    uint32_t device_size;
    char config[SIM_CONFIG_LEN]; /* the HAMI_SIM_GPUS / seed text this file was built from */
    uint8_t lock[SIM_LOCK_BYTES]; /* pthread_mutex_t, robust and process-shared */
    uint8_t reserved[928];
};

/* Version 4. One process holding device memory that more than one process can reach (VMM
 * memory exported as a file descriptor, cuMemAlloc memory behind a legacy IPC handle), keyed
 * by the memory's identity (its memfd's inode). Such memory is charged to exactly one live
 * holder, the row marked `charged`: its maker while it holds it, then the holder that has held
 * it longest; see docs/simgpu.md ("Shared memory") for what a real driver does. pid 0 marks a
 * free row. */
struct sim_hold {
    uint64_t ino;        /* the memory's memfd inode */
    uint64_t bytes;      /* what the charged holder's slot carries for it */
    uint64_t start_time; /* the holder's, as in sim_proc */
    int32_t pid;         /* the holder */
    int32_t host_pid;    /* the holder's sim_proc.host_pid, for a slot made on transfer */
    int32_t record;      /* the device record the memory is on */
    uint32_t charged;    /* 1: this holder's slot carries `bytes` */
    uint32_t refs;       /* the holder's own references (handles, imports) */
    uint32_t reserved;
    uint64_t pidns;      /* the holder's PID namespace, as in sim_proc */
    int64_t since_ns;    /* when it took the memory (CLOCK_MONOTONIC) */
};

struct sim_state {
    struct sim_header header;
    struct sim_device devices[SIM_MAX_DEVICES];
    struct sim_mig_gpu mig[SIM_MAX_DEVICES];
    uint8_t mig_used[SIM_MIG_RECORDS]; /* mig_records[i] belongs to a live GPU instance */
    uint8_t reserved_mig[64 - SIM_MIG_RECORDS];
    struct sim_device mig_records[SIM_MIG_RECORDS];
    struct sim_hold holds[SIM_MAX_HOLDS];
};

/* The numbers the Python mirror asserts too. */
_Static_assert(sizeof(struct sim_proc) == 64, "sim_proc size");
_Static_assert(sizeof(struct sim_busy) == 24, "sim_busy size");
_Static_assert(sizeof(struct sim_xid) == 32, "sim_xid size");
_Static_assert(offsetof(struct sim_device, busy_until_ns) == 176, "busy_until_ns offset");
_Static_assert(offsetof(struct sim_device, procs) == 448, "procs offset");
_Static_assert(offsetof(struct sim_device, busy) == 4544, "busy offset");
_Static_assert(offsetof(struct sim_device, xids) == 29120, "xids offset");
_Static_assert(offsetof(struct sim_device, bins) == 31168, "bins offset");
_Static_assert(sizeof(struct sim_busy_bins) == 68608, "sim_busy_bins size");
_Static_assert(sizeof(struct sim_device) == 99776, "sim_device size");
_Static_assert(offsetof(struct sim_header, config) == 32, "config offset");
_Static_assert(offsetof(struct sim_header, lock) == 1056, "lock offset");
_Static_assert(sizeof(struct sim_header) == 2048, "sim_header size");
_Static_assert(sizeof(struct sim_mig_ci) == 80, "sim_mig_ci size");
_Static_assert(sizeof(struct sim_mig_gi) == 616, "sim_mig_gi size");
_Static_assert(sizeof(struct sim_mig_gpu) == 4376, "sim_mig_gpu size");
_Static_assert(offsetof(struct sim_state, mig) == 2048 + 16 * 99776, "mig offset");
_Static_assert(offsetof(struct sim_state, mig_records) == 2048 + 16 * 99776 + 16 * 4376 + 64,
               "mig_records offset");
_Static_assert(sizeof(struct sim_hold) == 64, "sim_hold size");
_Static_assert(offsetof(struct sim_state, holds) ==
               2048 + 16 * 99776 + 16 * 4376 + 64 + 24 * 99776, "holds offset");
_Static_assert(sizeof(struct sim_state) ==
               2048 + 16 * 99776 + 16 * 4376 + 64 + 24 * 99776 + 1024 * 64, "sim_state size");

#endif /* HAMI_SIM_STATE_H */
