/* Which devices a process sees: HAMI_SIM_VISIBLE_DEVICES (what a container runtime exposes,
 * renumbered from 0 for libcuda and NVML alike) and, for libcuda only, CUDA_VISIBLE_DEVICES
 * on top of that view, with the real driver's rules. Pure functions of the text and the
 * devices' UUIDs. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* The device a token names among `count` devices (index or UUID, a unique UUID prefix
 * allowed as the driver does), or -1. */
static int find_device(const char *token, char *const *uuids, int count)
{
    if (isdigit((unsigned char)token[0])) {
        char *end = NULL;
        long v = strtol(token, &end, 10);
        return (*end == '\0' && v >= 0 && v < count) ? (int)v : -1;
    }
    if ((strncmp(token, "GPU-", 4) != 0 && strncmp(token, "MIG-", 4) != 0) || strlen(token) < 5)
        return -1;
    int found = -1;
    for (int i = 0; i < count; i++) {
        if (strncmp(uuids[i], token, strlen(token)) == 0) {
            if (found >= 0)
                return -1; /* ambiguous prefix */
            found = i;
        }
    }
    return found;
}

/* Splits `text` at commas into `map` (indices into `uuids`). strict: an unknown or repeated
 * entry is an error (container runtime); else the list ends at it (the CUDA driver's rule).
 * Returns the number of visible devices, or -1 with `err` set. */
static int parse_list(const char *text, char *const *uuids, int count, int strict, int *map,
                      char *err, size_t errlen)
{
    char buf[SIM_CONFIG_LEN];
    if (strlen(text) >= sizeof buf) {
        snprintf(err, errlen, "longer than %d characters", SIM_CONFIG_LEN - 1);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", text);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok;
         tok = strtok_r(NULL, ", ", &save)) {
        int dev = find_device(tok, uuids, count);
        for (int i = 0; i < n && dev >= 0; i++)
            if (map[i] == dev)
                dev = -1;
        if (dev < 0) {
            if (!strict)
                break;
            snprintf(err, errlen, "'%s' is not a device index below %d, a device UUID or "
                     "unique UUID prefix, or it repeats one", tok, count);
            return -1;
        }
        map[n++] = dev;
    }
    return n;
}

int sim_visible_view(const char *container, const char *cuda, char *const *uuids, int count,
                     int *view, char *err, size_t errlen)
{
    int n = count;
    for (int i = 0; i < count; i++)
        view[i] = i;
    if (container && container[0] && strcmp(container, "all") != 0) {
        n = strcmp(container, "none") == 0 ? 0 : parse_list(container, uuids, count, 1, view,
                                                            err, errlen);
        if (n < 0)
            return -1;
    }
    if (!cuda)
        return n;
    /* CUDA_VISIBLE_DEVICES indexes the container's view; entries past the first bad one
     * are ignored, as by the real driver. */
    char *names[SIM_MAX_DEVICES];
    int inner[SIM_MAX_DEVICES], picked[SIM_MAX_DEVICES];
    for (int i = 0; i < n; i++)
        names[i] = uuids[view[i]];
    int m = parse_list(cuda, names, n, 0, inner, err, errlen);
    for (int i = 0; i < m; i++)
        picked[i] = view[inner[i]];
    memcpy(view, picked, (size_t)(m > 0 ? m : 0) * sizeof *view);
    return m < 0 ? -1 : m;
}
