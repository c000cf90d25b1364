/* HAMI_SIM_GPUS parsing and device identity: pure functions, no I/O. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define SIM_MAX_SMS 1024

static void trim(char *s)
{
    size_t n = strlen(s), i = 0;
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    while (s[i] && isspace((unsigned char)s[i]))
        i++;
    memmove(s, s + i, n - i + 1);
}

uint64_t sim_parse_size(const char *s)
{
    char *end = NULL;
    if (!isdigit((unsigned char)s[0]))
        return 0;
    unsigned long long v = strtoull(s, &end, 10);
    uint64_t mult = 1;
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'k': mult = 1ULL << 10; end++; break;
    case 'm': mult = 1ULL << 20; end++; break;
    case 'g': mult = 1ULL << 30; end++; break;
    case 't': mult = 1ULL << 40; end++; break;
    default: return 0;
    }
    if (*end != '\0' || v == 0 || v > UINT64_MAX / mult)
        return 0;
    return (uint64_t)v * mult;
}

static int parse_sms(const char *s)
{
    char *end = NULL;
    if (!isdigit((unsigned char)s[0]))
        return 0;
    long v = strtol(s, &end, 10);
    return (*end == '\0' && v > 0 && v <= SIM_MAX_SMS) ? (int)v : 0;
}

/* One "MEMORY[/SMS[/NAME]]" item; `item` is modified. */
static int parse_item(char *item, int index, struct sim_gpu_spec *out, char *err, size_t errlen)
{
    char *parts[3] = {item, NULL, NULL};
    char *slash = strchr(item, '/');
    if (slash) {
        *slash = '\0';
        parts[1] = slash + 1;
        slash = strchr(parts[1], '/');
        if (slash) {
            *slash = '\0';
            parts[2] = slash + 1; /* a name may contain further slashes */
        }
    }
    for (int i = 0; i < 3; i++)
        if (parts[i])
            trim(parts[i]);
    out->memory = sim_parse_size(parts[0]);
    if (!out->memory) {
        snprintf(err, errlen, "device %d: memory '%s' is not a size like 16g, 512m or 1073741824",
                 index, parts[0]);
        return -1;
    }
    out->sms = SIM_DEFAULT_SMS;
    if (parts[1] && parts[1][0]) {
        out->sms = (uint32_t)parse_sms(parts[1]);
        if (!out->sms) {
            snprintf(err, errlen, "device %d: SM count '%s' is not a number from 1 to %d", index,
                     parts[1], SIM_MAX_SMS);
            return -1;
        }
    }
    const char *name = (parts[2] && parts[2][0]) ? parts[2] : SIM_DEFAULT_NAME;
    if (strlen(name) >= SIM_NAME_LEN) {
        snprintf(err, errlen, "device %d: name is longer than %d characters", index,
                 SIM_NAME_LEN - 1);
        return -1;
    }
    snprintf(out->name, sizeof out->name, "%s", name);
    return 0;
}

int sim_config_parse(const char *text, struct sim_config *out, char *err, size_t errlen)
{
    char buf[SIM_CONFIG_LEN];
    memset(out, 0, sizeof *out);
    if (strlen(text) >= sizeof buf) {
        snprintf(err, errlen, "longer than %d characters", SIM_CONFIG_LEN - 1);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    int index = 0;
    /* strtok_r would skip empty items; walk commas by hand so "16g,,8g" is reported. */
    for (char *item = buf; item; item = save, index++) {
        save = strchr(item, ',');
        if (save)
            *save++ = '\0';
        if (index >= SIM_MAX_DEVICES) {
            snprintf(err, errlen, "more than %d devices", SIM_MAX_DEVICES);
            return -1;
        }
        trim(item);
        if (!item[0]) {
            snprintf(err, errlen, "device %d: empty entry (expected MEMORY[/SMS[/NAME]])", index);
            return -1;
        }
        if (parse_item(item, index, &out->gpus[index], err, errlen) < 0)
            return -1;
    }
    out->count = index;
    return 0;
}

/* FNV-1a: a stable hash, so UUIDs stay the same across runs and machines. */
static uint64_t fnv1a(const char *s, uint64_t h)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* splitmix64's finaliser: spreads FNV's similar outputs for similar keys over all bits. */
static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void sim_uuid_of(char *out, size_t len, const char *prefix, const char *key)
{
    uint64_t hi = mix(fnv1a(key, 0xcbf29ce484222325ULL));
    uint64_t lo = mix(hi ^ 0x9e3779b97f4a7c15ULL);
    snprintf(out, len, "%s-%08x-%04x-%04x-%04x-%012llx", prefix, (unsigned)(hi >> 32),
             (unsigned)(hi >> 16) & 0xffff, (unsigned)hi & 0xffff, (unsigned)(lo >> 48),
             (unsigned long long)(lo & 0xffffffffffffULL));
}

static void make_uuid(char *out, size_t len, int index, const char *seed)
{
    char key[SIM_CONFIG_LEN + 32];
    snprintf(key, sizeof key, "hami-sim/%s/%d", seed ? seed : "", index);
    sim_uuid_of(out, len, "GPU", key);
}

void sim_device_identity(struct sim_device *dev, int index, const struct sim_gpu_spec *spec,
                         const char *uuid_seed)
{
    dev->index = (uint32_t)index;
    dev->total_bytes = spec->memory;
    dev->sms = spec->sms;
    snprintf(dev->name, sizeof dev->name, "%s", spec->name);
    make_uuid(dev->uuid, sizeof dev->uuid, index, uuid_seed);
    const struct sim_model *model = sim_model_of(spec->name);
    dev->cc_major = model->cc_major;
    dev->cc_minor = model->cc_minor;
    dev->pci_bus = 0x17 + (uint32_t)index * 0x10;
    dev->numa_node = index / 8; /* eight GPUs per socket, as on common 2-socket servers */
}

int sim_driver_version(void)
{
    /* HAMI_SIM_DRIVER_VERSION: "13020" or "13.2"; anything else is one line and the default */
    static int version;
    if (version)
        return version;
    int v = SIM_CUDA_DRIVER_VERSION;
    const char *text = getenv("HAMI_SIM_DRIVER_VERSION");
    if (text && *text) {
        unsigned major = 0, minor = 0;
        char dot = 0, extra = 0;
        int n = sscanf(text, "%u%c%u%c", &major, &dot, &minor, &extra);
        if (n == 1 && major >= 9000 && major <= 99990)
            v = (int)major;
        else if (n == 3 && dot == '.' && major >= 9 && major <= 99 && minor <= 9)
            v = (int)(major * 1000 + minor * 10);
        else
            fprintf(stderr, "hami-sim: HAMI_SIM_DRIVER_VERSION='%s' is not a CUDA version like "
                            "13020 or 13.2; using %d\n", text, v);
    }
    __atomic_store_n(&version, v, __ATOMIC_RELAXED);
    return v;
}
