/* Processes in other PID namespaces. The ledger names each process by its PID in its own
 * namespace, the namespace (its /proc/self/ns/pid inode) and its start time. A real driver
 * reports a process to an NVML caller by its PID in the caller's namespace, and leaves out
 * those the caller cannot see (the kernel driver translates each client's PID for the caller:
 * osFindNsPid in NVIDIA's open kernel modules); hami-node, in the host's namespace, thus sees
 * host PIDs. The same translation serves the liveness checks, which read /proc: a process
 * that cannot be found is gone only where this process could have seen it (its own namespace,
 * one with a member in sight, or any from the host's initial namespace); elsewhere it is not
 * this process's to judge, and a process that can see it reaps it. */
#include <dirent.h>
#include <signal.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hami_proc.h"
#include "sim.h"

#define CACHE 64
#define INIT_PIDNS 0xEFFFFFFCULL /* the kernel's PROC_PID_INIT_INO */

struct seen {
    uint64_t pidns, start_time;
    int32_t pid, here;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct seen cache[CACHE];
static unsigned int next_entry;

/* The namespace's inode, from the link's text "pid:[4026531836]" (readlink, not stat: the
 * library needs nothing newer than glibc 2.17, c/compat). */
static uint64_t pidns_of(const char *pid)
{
    char path[300], link[64];
    snprintf(path, sizeof path, "/proc/%s/ns/pid", pid);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 5 || strncmp(link, "pid:[", 5))
        return 0;
    link[n] = '\0';
    return strtoull(link + 5, NULL, 10);
}

uint64_t sim_my_pidns(void)
{
    static uint64_t mine;
    static pid_t known_for;
    if (known_for != getpid()) { /* a forked child may be a new namespace's first process */
        mine = pidns_of("self");
        known_for = getpid();
    }
    return mine;
}

/* The last NSpid entry of /proc/<dir>/status: the PID in the process's own namespace. */
static int32_t innermost_pid(const char *dir)
{
    char path[300], buf[4096];
    snprintf(path, sizeof path, "/proc/%s/status", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *line = strstr(buf, "\nNSpid:");
    if (!line)
        return 0;
    char *end = strchr(line + 1, '\n'), *last = NULL;
    if (end)
        *end = '\0';
    for (char *t = strtok(line + 7, " \t"); t; t = strtok(NULL, " \t"))
        last = t;
    return last ? (int32_t)atoi(last) : 0;
}

/* Scans this process's /proc for the process; its PID here, or 0 when it is not visible.
 * *member: whether any process of that namespace is in sight. */
static int32_t scan(int32_t pid, uint64_t pidns, uint64_t start_time, int *member)
{
    DIR *proc = opendir("/proc");
    int32_t found = 0;
    *member = 0;
    for (struct dirent *e; proc && !found && (e = readdir(proc));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9' || pidns_of(e->d_name) != pidns)
            continue;
        *member = 1;
        if (innermost_pid(e->d_name) != pid)
            continue;
        int32_t here = (int32_t)atoi(e->d_name);
        if (!start_time || hami_proc_start_time(here) == start_time)
            found = here;
    }
    if (proc)
        closedir(proc);
    return found;
}

int32_t sim_nvml_pid(const struct sim_proc *p)
{
    if (!p->pidns || p->pidns == sim_my_pidns())
        return p->host_pid ? p->host_pid : p->pid;
    return sim_pid_here(p->pid, p->pidns, p->start_time);
}

/* sim_pid_here; *known: whether a 0 means the process is gone (see the top). */
static int32_t pid_here(int32_t pid, uint64_t pidns, uint64_t start_time, int *known)
{
    *known = 1;
    if (!pidns || pidns == sim_my_pidns())
        return pid;
    int32_t here = 0;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE && !here; i++)
        if (cache[i].pid == pid && cache[i].pidns == pidns && cache[i].start_time == start_time)
            here = cache[i].here;
    pthread_mutex_unlock(&cache_lock);
    if (here && (!start_time || hami_proc_start_time(here) == start_time))
        return here;
    int member = 0;
    here = scan(pid, pidns, start_time, &member);
    *known = here || member || sim_my_pidns() == INIT_PIDNS;
    if (here) {
        pthread_mutex_lock(&cache_lock);
        cache[next_entry++ % CACHE] = (struct seen){pidns, start_time, pid, here};
        pthread_mutex_unlock(&cache_lock);
    }
    return here;
}

int32_t sim_pid_here(int32_t pid, uint64_t pidns, uint64_t start_time)
{
    int known;
    return pid_here(pid, pidns, start_time, &known);
}

int sim_proc_alive(int32_t pid, uint64_t pidns, uint64_t start_time)
{
    int known;
    int32_t here = pid_here(pid, pidns, start_time, &known);
    if (!here)
        return !known;
    /* Without /proc the recorded start time is 0 and only the pid's existence can be checked. */
    return start_time ? hami_proc_start_time(here) == start_time : kill(here, 0) == 0;
}
