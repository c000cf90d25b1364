/* The shim's configuration: HAMi's environment variables (reference/protocols.md section 5)
 * plus the shim's own. Pure functions of the environment's text; nothing is read twice.
 *
 * Sizes: a bare number is bytes; suffixes k, m, g (binary multiples) or KiB, MiB, GiB, in any
 * letter case ("3000m", "3000M", "2GiB", "2gib"). Anything else ("1gb", "1.5g", "1 g", "-1",
 * "") is refused, and a refused variable makes the whole process fail closed: a bad limit
 * never silently becomes no limit or a wrong one. hami_node/shim/sizes.py applies the same
 * rules; tests/shim runs one table of cases through both.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "vgpu.h"

#define MEM_LIMIT "CUDA_DEVICE_MEMORY_LIMIT"
#define SM_LIMIT "CUDA_DEVICE_SM_LIMIT"
#define UUID_LIMIT "HAMI_VGPU_DEVICE_"

static const struct {
    const char *suffix;
    unsigned shift;
} suffixes[] = {{"", 0}, {"k", 10}, {"m", 20}, {"g", 30}, {"kib", 10}, {"mib", 20}, {"gib", 30}};

int vgpu_parse_size(const char *text, uint64_t *out)
{
    const char *p = text;
    uint64_t v = 0;
    if (!isdigit((unsigned char)*p))
        return -1;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned digit = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        if (strcasecmp(p, suffixes[i].suffix) != 0)
            continue;
        if (v > (UINT64_MAX >> suffixes[i].shift))
            return -1;
        *out = v << suffixes[i].shift;
        return 0;
    }
    return -1;
}

/* A non-negative decimal integer no larger than `max`; -1 when malformed. */
static long parse_uint(const char *text, long max)
{
    char *end = NULL;
    if (!isdigit((unsigned char)text[0]))
        return -1;
    long v = strtol(text, &end, 10);
    return (*end == '\0' && v >= 0 && v <= max) ? v : -1;
}

/* Value of `name` in envp, or NULL. */
static const char *lookup(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

static int refuse_size(const char *name, const char *value, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s='%s' is not a size: give bytes or a number with a k/m/g "
             "(KiB/MiB/GiB) suffix, e.g. 3000m or 2g", name, value);
    return -1;
}

/* One CUDA_DEVICE_MEMORY_LIMIT_<i>=... or CUDA_DEVICE_SM_LIMIT_<i>=... environment entry. */
static int parse_indexed(const char *entry, int is_mem, struct vgpu_config *out, char *err,
                         size_t errlen)
{
    const char *rest = entry + (is_mem ? sizeof MEM_LIMIT : sizeof SM_LIMIT);
    const char *eq = strchr(rest, '=');
    char index_text[16] = "", name[64];
    if (eq && (size_t)(eq - rest) < sizeof index_text)
        memcpy(index_text, rest, (size_t)(eq - rest));
    long index = parse_uint(index_text, VGPU_MAX_DEVICES - 1);
    if (!eq || index < 0) {
        snprintf(err, errlen, "%.*s='%s': the device index must be a number from 0 to %d",
                 (int)(eq ? eq - entry : (long)strlen(entry)), entry, eq ? eq + 1 : "",
                 VGPU_MAX_DEVICES - 1);
        return -1;
    }
    const char *value = eq + 1;
    snprintf(name, sizeof name, "%s_%ld", is_mem ? MEM_LIMIT : SM_LIMIT, index);
    if (!value[0])
        return 0; /* empty: the all-devices value stays */
    if (is_mem)
        return vgpu_parse_size(value, &out->mem_limit[index]) < 0
                   ? refuse_size(name, value, err, errlen) : 0;
    long pct = parse_uint(value, 1000000);
    if (pct < 0) {
        snprintf(err, errlen, "%s='%s' is not a percentage (0..100, 0 = no limit)", name, value);
        return -1;
    }
    out->sm_limit[index] = (uint32_t)pct;
    return 0;
}

/* CUDA_DEVICE_MEMORY_LIMIT / CUDA_DEVICE_SM_LIMIT and their _<i> forms. */
static int parse_limits(char *const *envp, struct vgpu_config *out, char *err, size_t errlen)
{
    const char *all = lookup(envp, MEM_LIMIT), *sm = lookup(envp, SM_LIMIT);
    uint64_t mem_all = 0;
    long sm_all = 0;
    if (all && all[0] && vgpu_parse_size(all, &mem_all) < 0)
        return refuse_size(MEM_LIMIT, all, err, errlen);
    if (sm && sm[0] && (sm_all = parse_uint(sm, 1000000)) < 0) {
        snprintf(err, errlen, "%s='%s' is not a percentage (0..100, 0 = no limit)", SM_LIMIT, sm);
        return -1;
    }
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        out->mem_limit[i] = mem_all;
        out->sm_limit[i] = (uint32_t)sm_all;
    }
    for (char *const *e = envp; e && *e; e++) {
        int is_mem = strncmp(*e, MEM_LIMIT "_", sizeof MEM_LIMIT) == 0;
        if ((is_mem || strncmp(*e, SM_LIMIT "_", sizeof SM_LIMIT) == 0) &&
            parse_indexed(*e, is_mem, out, err, errlen) < 0)
            return -1;
    }
    return 0;
}

const struct vgpu_uuid_limit *vgpu_config_uuid(const struct vgpu_config *c, const char *uuid)
{
    for (int i = 0; i < c->n_by_uuid; i++)
        if (strcmp(c->by_uuid[i].uuid, uuid) == 0)
            return &c->by_uuid[i];
    return NULL;
}

static int refuse_uuid_entry(const char *entry, const char *why, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s (expected %s<tag>=GPU-<uuid>,<memory>,<SM percent>, e.g. "
             "GPU-0fc3...,3000m,30)", entry, why, UUID_LIMIT);
    return -1;
}

/* One HAMI_VGPU_DEVICE_<tag>=<uuid>,<memory>,<sm> entry. Each DRA device of a container sets
 * one, under a tag of its own, so several claims never overwrite each other's variables; two
 * entries for one GPU (two shares of it in one container) add up. */
static int parse_uuid_entry(const char *entry, struct vgpu_config *out, char *err, size_t errlen)
{
    const char *value = strchr(entry, '=');
    char buf[160], *save = NULL;
    if (!value || snprintf(buf, sizeof buf, "%s", value + 1) >= (int)sizeof buf)
        return refuse_uuid_entry(entry, "too long", err, errlen);
    char *uuid = strtok_r(buf, ",", &save), *mem = strtok_r(NULL, ",", &save);
    char *sm = strtok_r(NULL, ",", &save);
    uint64_t bytes = 0;
    long pct = sm ? parse_uint(sm, 1000000) : -1;
    if (!uuid || (strncmp(uuid, "GPU-", 4) != 0 && strncmp(uuid, "MIG-", 4) != 0) ||
        strlen(uuid) >= VGPU_UUID_LEN)
        return refuse_uuid_entry(entry, "the first field must be a GPU or MIG UUID", err, errlen);
    if (!mem || vgpu_parse_size(mem, &bytes) < 0)
        return refuse_uuid_entry(entry, "the memory is not a size", err, errlen);
    if (pct < 0 || strtok_r(NULL, ",", &save))
        return refuse_uuid_entry(entry, "the SM limit is not a percentage", err, errlen);
    struct vgpu_uuid_limit *l = (struct vgpu_uuid_limit *)vgpu_config_uuid(out, uuid);
    if (!l) {
        if (out->n_by_uuid == VGPU_MAX_DEVICES)
            return refuse_uuid_entry(entry, "more GPUs than the shim keeps", err, errlen);
        l = &out->by_uuid[out->n_by_uuid++];
        snprintf(l->uuid, sizeof l->uuid, "%s", uuid);
    }
    l->mem = bytes > UINT64_MAX - l->mem ? UINT64_MAX : l->mem + bytes;
    l->sm += (uint32_t)pct;
    return 0;
}

static int parse_uuid_limits(char *const *envp, struct vgpu_config *out, char *err,
                             size_t errlen)
{
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, UUID_LIMIT, sizeof UUID_LIMIT - 1) == 0 &&
            parse_uuid_entry(*e, out, err, errlen) < 0)
            return -1;
    return 0;
}

static int parse_policy(const char *text, int *out, char *err, size_t errlen)
{
    static const char *const names[] = {"default", "force", "disable"};
    for (int i = 0; i < 3; i++) {
        if (!text || !text[0] || strcasecmp(text, names[i]) == 0) {
            *out = text && text[0] ? i : VGPU_POLICY_DEFAULT;
            return 0;
        }
    }
    snprintf(err, errlen, "GPU_CORE_UTILIZATION_POLICY='%s' must be default, force or disable",
             text);
    return -1;
}

/* The shim's own settings and the small HAMi ones. */
static int parse_misc(char *const *envp, struct vgpu_config *out, char *err, size_t errlen)
{
    const char *prio = lookup(envp, "CUDA_TASK_PRIORITY");
    const char *level = lookup(envp, "LIBCUDA_LOG_LEVEL");
    const char *overhead = lookup(envp, "HAMI_VGPU_CONTEXT_OVERHEAD");
    const char *stop = lookup(envp, "HAMI_VGPU_TEST_STOP_IN_LOCK");
    if (parse_policy(lookup(envp, "GPU_CORE_UTILIZATION_POLICY"), &out->policy, err, errlen) < 0)
        return -1;
    out->priority = prio && prio[0] ? (int)parse_uint(prio, 1000) : 0;
    if (out->priority < 0) {
        snprintf(err, errlen, "CUDA_TASK_PRIORITY='%s' must be a number (0 = highest)", prio);
        return -1;
    }
    out->log_level = level && level[0] ? (int)parse_uint(level, 4) : VGPU_LOG_WARN;
    if (out->log_level < 0) {
        snprintf(err, errlen, "LIBCUDA_LOG_LEVEL='%s' must be 0 (errors) to 4 (debug)", level);
        return -1;
    }
    if (overhead && overhead[0] && vgpu_parse_size(overhead, &out->ctx_overhead) < 0)
        return refuse_size("HAMI_VGPU_CONTEXT_OVERHEAD", overhead, err, errlen);
    out->test_stop_in_lock = stop && strcmp(stop, "1") == 0;
    return 0;
}

/* Explicit CUDA_DEVICE_MEMORY_SHARED_CACHE, else ${TMPDIR:-/tmp}/hami-vgpu-<uid>/vgpu.cache:
 * one file per user, shared by all of that user's processes. */
static int cache_path(char *const *envp, struct vgpu_config *out, char *err, size_t errlen)
{
    const char *path = lookup(envp, "CUDA_DEVICE_MEMORY_SHARED_CACHE");
    const char *tmp = lookup(envp, "TMPDIR");
    int n;
    out->cache_is_default = !path || !path[0];
    if (!out->cache_is_default)
        n = snprintf(out->cache_path, sizeof out->cache_path, "%s", path);
    else
        n = snprintf(out->cache_path, sizeof out->cache_path, "%s/hami-vgpu-%u/vgpu.cache",
                     tmp && tmp[0] ? tmp : "/tmp", (unsigned)getuid());
    if (n < 0 || (size_t)n >= sizeof out->cache_path) {
        snprintf(err, errlen, "CUDA_DEVICE_MEMORY_SHARED_CACHE: the path is too long");
        return -1;
    }
    return 0;
}

int vgpu_config_parse(char *const *envp, struct vgpu_config *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (parse_limits(envp, out, err, errlen) < 0 || parse_uuid_limits(envp, out, err, errlen) < 0 ||
        parse_misc(envp, out, err, errlen) < 0)
        return -1;
    return cache_path(envp, out, err, errlen);
}
