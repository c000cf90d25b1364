/* Process identity from /proc: a pid plus its start time names one process even after the pid
 * is reused. Used by the simulated driver's ledger and the shim's accounting file. */
#ifndef HAMI_PROC_H
#define HAMI_PROC_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* Reads the start time (clock ticks after boot, field 22 of /proc/<pid>/stat) of a process:
 * 1 with *start set, 0 when it is a zombie (the driver frees a process's memory when it exits),
 * -1 when /proc does not show it (gone, or hidden from this user by hidepid). */
static inline int hami_proc_start(pid_t pid, uint64_t *start)
{
    char path[48], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!p || p[1] != ' ')
        return -1;
    if (p[2] == 'Z' || p[2] == 'X' || p[2] == 'x')
        return 0;
    int field = 3; /* p + 2 is field 3, the state */
    for (p += 2; *p && field < 22; p++)
        field += *p == ' ';
    *start = field == 22 ? strtoull(p, NULL, 10) : 0;
    return 1;
}

/* The start time of a live process; 0 when it is gone, a zombie or hidden. */
static inline uint64_t hami_proc_start_time(pid_t pid)
{
    uint64_t start = 0;
    return hami_proc_start(pid, &start) == 1 ? start : 0;
}

#endif /* HAMI_PROC_H */
