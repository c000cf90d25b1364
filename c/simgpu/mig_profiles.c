/* The MIG profile tables: GPU-instance profiles with their memory, SMs and possible placements
 * per model, as `nvidia-smi mig -lgip` / `-lgipp` print them on the real products (A100-40GB,
 * A100-80GB and H100 80GB from NVIDIA's MIG user guide and driver output; H200 141GB's memory
 * per profile is derived from its 8 memory slices, its SMs are the H100's). Pure data. */
#include <string.h>

#include "mig.h"

#define P1 7, {0, 1, 2, 3, 4, 5, 6} /* one memory slice: any of the first seven */
#define P2 4, {0, 2, 4, 6}          /* 1g with two memory slices */
#define P2C 3, {0, 2, 4}            /* 2g */
#define P4 2, {0, 4}                /* 3g */
#define P4F 1, {0}                  /* 4g */
#define P8 1, {0}                   /* 7g */

/* NVML_GPU_INSTANCE_PROFILE_*: 1_SLICE 0, 2_SLICE 1, 3_SLICE 2, 4_SLICE 3, 7_SLICE 4,
 * 1_SLICE_REV1 (+me) 7, 1_SLICE_REV2 (1g with twice the memory) 9. Unique ids: 19, 14, 9, 5,
 * 0, 20, 15 on every model here. */
#define TABLE(n1, m1, n1l, m1l, n2, m3, n3, n4, n7, m7, s1, s1l, s2, s3, s4, s7)          \
    {{0, 19, n1, 1, 7, s1, m1, 0, 1, P1}, {7, 20, n1 "+me", 1, 1, s1, m1, 1, 1, P1},       \
     {9, 15, n1l, 1, 4, s1l, m1l, 0, 2, P2}, {1, 14, n2, 2, 3, s2, m1l, 0, 2, P2C},        \
     {2, 9, n3, 3, 2, s3, m3, 0, 4, P4}, {3, 5, n4, 4, 1, s4, m3, 0, 4, P4F},              \
     {4, 0, n7, 7, 1, s7, m7, 0, 8, P8}}

struct model {
    const char *key;
    uint64_t min_gib, max_gib; /* told apart by memory where the name does not say */
    struct sim_mig_profile profiles[7];
};

static const struct model models[] = {
    {"A100", 0, 60,
     TABLE("1g.5gb", 4864, "1g.10gb", 9856, "2g.10gb", 20096, "3g.20gb", "4g.20gb", "7g.40gb",
           40448, 14, 14, 28, 42, 56, 98)},
    {"A100", 60, 1 << 20,
     TABLE("1g.10gb", 9728, "1g.20gb", 19968, "2g.20gb", 40192, "3g.40gb", "4g.40gb", "7g.80gb",
           81152, 14, 14, 28, 42, 56, 98)},
    {"H100", 0, 90,
     TABLE("1g.10gb", 9984, "1g.20gb", 20096, "2g.20gb", 40448, "3g.40gb", "4g.40gb", "7g.80gb",
           81152, 16, 26, 32, 60, 64, 132)},
    {"H200", 0, 1 << 20,
     TABLE("1g.18gb", 18176, "1g.35gb", 36352, "2g.35gb", 72448, "3g.71gb", "4g.71gb",
           "7g.141gb", 143104, 16, 26, 32, 60, 64, 132)},
};

int sim_mig_table_of(const struct sim_device *d, struct sim_mig_table *out)
{
    uint64_t gib = d->total_bytes >> 30;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        const struct model *m = &models[i];
        if (!strstr(d->name, m->key) || gib < m->min_gib || gib >= m->max_gib)
            continue;
        out->model = m->key;
        out->count = 7;
        memcpy(out->profiles, m->profiles, sizeof m->profiles);
        /* A device configured smaller than the product (HAMI_SIM_GPUS '16g/.../A100...')
         * keeps the proportions: every profile shrinks with it. */
        uint64_t full = m->profiles[6].memory_mib, have = d->total_bytes >> 20;
        if (have < full)
            for (int p = 0; p < 7; p++)
                out->profiles[p].memory_mib = out->profiles[p].memory_mib * have / full;
        return 0;
    }
    return -1;
}

const struct sim_mig_profile *sim_mig_by_index(const struct sim_mig_table *t, uint32_t index)
{
    for (int i = 0; i < t->count; i++)
        if (t->profiles[i].index == index)
            return &t->profiles[i];
    return NULL;
}

const struct sim_mig_profile *sim_mig_by_id(const struct sim_mig_table *t, uint32_t id)
{
    for (int i = 0; i < t->count; i++)
        if (t->profiles[i].id == id)
            return &t->profiles[i];
    return NULL;
}

uint32_t sim_mig_ci_slices(uint32_t ci_profile)
{
    static const uint32_t slices[SIM_MIG_CI_PROFILES] = {1, 2, 3, 4, 7};
    return ci_profile < SIM_MIG_CI_PROFILES ? slices[ci_profile] : 0;
}

int sim_mig_ci_starts(uint32_t ci_profile, uint32_t slices, uint32_t *starts)
{
    uint32_t k = sim_mig_ci_slices(ci_profile);
    int n = 0;
    if (!k || k > slices)
        return 0;
    if (k == 3) { /* 3-slice compute instances sit at 0 and, on a 7-slice GPU instance, 4 */
        starts[n++] = 0;
        if (slices >= 7)
            starts[n++] = 4;
        return n;
    }
    for (uint32_t s = 0; s + k <= slices; s += k)
        starts[n++] = s;
    return n;
}
