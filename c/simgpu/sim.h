/* Internal interface shared by the simulated driver's C files (not installed, not exported).
 *
 * Rule for every exported entry point: it calls only static or internal (hidden) functions,
 * never another exported entry point, so that a preloaded shim interposing the API counts
 * each call exactly once. The libraries are also linked with -Bsymbolic as a second guard.
 */
#ifndef HAMI_SIM_H
#define HAMI_SIM_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "sim_state.h"

#define SIM_API __attribute__((visibility("default")))

#ifdef HAMI_GLIBC_BASE /* c/compat/glibc_floor.h leaves dlsym to each library (libvgpu has its own) */
__asm__(".symver dlsym,dlsym@" HAMI_GLIBC_BASE);
#endif

/* Driver identity reported by both libraries. */
#define SIM_CUDA_DRIVER_VERSION 13000
#define SIM_NVML_DRIVER_VERSION "580.65.06"
#define SIM_NVML_LIB_VERSION "13.580.65.06"

/* ---- configuration (config.c): pure functions of the environment's text ---- */

#define SIM_DEFAULT_GPUS "40g/108/NVIDIA A100-SXM4-40GB,40g/108/NVIDIA A100-SXM4-40GB"
#define SIM_DEFAULT_SMS 108
#define SIM_DEFAULT_NAME "NVIDIA A100-SXM4-40GB"

struct sim_gpu_spec {
    uint64_t memory;
    uint32_t sms;
    char name[SIM_NAME_LEN];
};

struct sim_config {
    int count;
    struct sim_gpu_spec gpus[SIM_MAX_DEVICES];
};

/* The driver's CUDA version: HAMI_SIM_DRIVER_VERSION ("13020" or "13.2"), else
 * SIM_CUDA_DRIVER_VERSION. */
int sim_driver_version(void);

/* A GPU product (models.c), found by a substring of the device name. */
struct sim_model {
    const char *key;
    int cc_major, cc_minor;
    int clock_khz, memory_clock_khz, bus_width_bits, l2_bytes;
    unsigned int pci_device_id;
};
const struct sim_model *sim_model_of(const char *name);

/* Parses HAMI_SIM_GPUS text; on failure returns -1 with one line naming the bad part. */
int sim_config_parse(const char *text, struct sim_config *out, char *err, size_t errlen);
/* "16g", "512m", "1073741824" (binary multiples); 0 when malformed. */
uint64_t sim_parse_size(const char *text);
/* "<prefix>-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", a stable hash of `key`. */
void sim_uuid_of(char *out, size_t len, const char *prefix, const char *key);
/* Fills a device record's identity (name, UUID, compute capability, PCI, NUMA). */
void sim_device_identity(struct sim_device *dev, int index, const struct sim_gpu_spec *spec,
                         const char *uuid_seed);

/* The devices a process sees, as indices into `uuids` (visible.c): HAMI_SIM_VISIBLE_DEVICES
 * text (`container`: indices or UUIDs, "all", "none"; unset or empty: all) and then, when
 * `cuda` is not NULL, CUDA_VISIBLE_DEVICES on top with the driver's rules. Returns the count,
 * or -1 with `err` set when `container` is malformed. */
int sim_visible_view(const char *container, const char *cuda, char *const *uuids, int count,
                     int *view, char *err, size_t errlen);
/* 1 in the simulated libcuda (which honours CUDA_VISIBLE_DEVICES), 0 in libnvidia-ml. */
extern const int sim_honours_cuda_visible;

/* ---- shared state (state.c) ---- */

enum sim_status {
    SIM_READY = 0,
    SIM_BAD_CONFIG = 1, /* HAMI_SIM_GPUS malformed: already reported on stderr */
    SIM_NO_STATE = 2,   /* the state file could not be created or mapped: reported */
};

/* Opens (once per process) the configuration and the state file. Safe from any thread and
 * any entry point, including calls from other libraries' constructors. */
enum sim_status sim_open(void);
/* The state directory: $HAMI_SIM_STATE, else $TMPDIR/hami-sim-<uid>. */
void sim_state_dir(char *out, size_t len);
int sim_device_count(void);
struct sim_device *sim_device(int index);
/* A device record by its index: a GPU (< SIM_MAX_DEVICES) or a GPU instance's record. */
struct sim_device *sim_device_record(int record);
/* Device memory a context takes on `dev` (HAMI_SIM_CTX_OVERHEAD, else the model's default),
 * and module memory charged when a context first launches a kernel (HAMI_SIM_MODULE_MEM). */
uint64_t sim_ctx_overhead(int dev);
uint64_t sim_module_memory(void);
/* The host PID NVML reports for this process: getpid() + HAMI_SIM_PID_OFFSET, as a container
 * without hostPID sees NVML name its processes by PIDs that are not its own. */
int32_t sim_host_pid_offset(void);

void sim_lock(void);
/* 0 with the lock held, -1 when another holds it (queries answer "not ready" then). */
int sim_trylock(void);
void sim_unlock(void);

int64_t sim_now_ns(void);
void sim_sleep_until(int64_t t_ns);

/* Device memory accounting for this process. sim_charge returns 0, or -1 when the device
 * lacks `bytes` even after reclaiming dead processes' memory. */
int sim_charge(int dev, uint64_t bytes);
void sim_uncharge(int dev, uint64_t bytes);
/* Memory in use on a device record by the processes it lists; caller holds the lock. */
uint64_t sim_used_locked(const struct sim_device *d);
void sim_context_count(int dev, int delta);
/* Memory in use on the device by live processes (takes the lock, reaps the dead). */
uint64_t sim_device_used(int dev);
/* Called once the state is mapped: remembers who this process is. */
void sim_slots_init(void);
/* Who this process is in the ledger (a forked child learns it afresh). */
struct sim_self {
    int32_t pid; /* in its own PID namespace */
    uint64_t start_time;
    int32_t host_pid;
    uint64_t pidns;
};
struct sim_self sim_self(void);
/* This process's slot on a device record, claimed on first use; NULL when all are taken. */
struct sim_proc *sim_my_slot_locked(struct sim_device *d);
/* The slot of a process on `d`, made for it when it has none. */
struct sim_proc *sim_slot_for_locked(struct sim_device *d, const struct sim_self *who);

/* ---- other PID namespaces (pidns.c) ---- */
/* This process's PID namespace (the inode of /proc/self/ns/pid); 0 when unreadable. */
uint64_t sim_my_pidns(void);
/* The PID, in this process's namespace, of process `pid` of namespace `pidns` started at
 * `start_time`; 0 when this process cannot see it (or it is gone). */
int32_t sim_pid_here(int32_t pid, uint64_t pidns, uint64_t start_time);
/* Whether that process lives; one this process cannot see into counts as alive (a process
 * that can see it judges). */
int sim_proc_alive(int32_t pid, uint64_t pidns, uint64_t start_time);
/* The PID NVML reports to this process for a slot, as a real driver translates it for the
 * caller's namespace (HAMI_SIM_PID_OFFSET applies within one namespace); 0: not visible. */
int32_t sim_nvml_pid(const struct sim_proc *p);
/* Takes `bytes` off a slot, freeing the slot when nothing is left on it. */
void sim_slot_sub_locked(struct sim_proc *p, uint64_t bytes);
/* The index of a device record (sim_device_record's argument); -1 if it is none. */
int sim_record_of(const struct sim_device *d);
/* This process's ordinal of a device record; -1 when it does not see it. */
int sim_ordinal_of_record(int record);
/* The whole mapped state; NULL when it could not be opened. */
struct sim_state *sim_state_map(void);

/* ---- memory more than one process holds (holds.c) ---- */
/* This process holds the shared memory `ino` (a memfd's inode; `bytes` on device `dev`).
 * `charged`: its slot already carries the bytes (the maker). Holding it again counts a
 * reference. Returns 0, or -1 when the table is full. */
int sim_hold_add(int dev, uint64_t ino, uint64_t bytes, int charged);
/* Lets go of one reference; at the last, the charge (if this process carried it) moves to the
 * holder that has held the memory longest, or leaves the device when none is left. Returns 0
 * when this process held no row for it (the caller then settles its own charge). */
int sim_hold_drop(int dev, uint64_t ino);
/* Rows of dead holders on `d`: their charges move on; caller holds the lock. */
void sim_holds_sweep_locked(struct sim_device *d);
/* Frees the slots of processes that are gone; caller holds the lock. */
void sim_reap_locked(struct sim_device *d, int force);

/* Records that the device ran `pid`'s kernels in [start, end) (timeline.c plays the device;
 * this is its log, read by NVML's utilization and hami_sim's BusyRecorder); caller holds the
 * lock. */
void sim_busy_add_locked(struct sim_device *d, int32_t pid, int64_t start, int64_t end);
/* Busy nanoseconds of `pid` (0: any process) on the device within [from, to), from the time
 * bins (whatever the number of kernels; partial bins pro rata); caller holds the lock. */
int64_t sim_busy_binned_ns_locked(const struct sim_device *d, int64_t from, int64_t to,
                                  int32_t pid);
/* The same from the ring of intervals (exact, but only as far back as the ring reaches);
 * caller holds the lock. */
int64_t sim_busy_ns_locked(const struct sim_device *d, int64_t from, int64_t to, int32_t pid);
/* Records an XID event on a device (used by hami-sim inject-xid). */
int sim_inject_xid(int dev, uint64_t xid);

/* What NVML and cuMemGetInfo report as a process's use: the driver hands out memory in 2 MiB
 * pages, so a process's figure moves in whole pages. */
#define SIM_PAGE (2ULL << 20)
static inline uint64_t sim_reported(uint64_t used) { return (used + SIM_PAGE - 1) / SIM_PAGE * SIM_PAGE; }

/* ---- helpers ---- */
static inline uint64_t sim_round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

#endif /* HAMI_SIM_H */
