/* The GPU products the simulator knows, by what their names announce: compute capability,
 * clocks, memory bus, L2 and PCI device ID, from the vendors' public specifications. A name
 * that matches none is an A100-class device. Longer keys come first ("H200" before "H20",
 * "L40" before "L4", "A100" before "A10"). */
#include <string.h>

#include "sim.h"

static const struct sim_model models[] = {
    /* key     cc      clock kHz  mem kHz  bus   L2 bytes     PCI id */
    {"B200", 10, 0, 1965000, 4000000, 8192, 132120576, 0x2901},
    {"H100", 9, 0, 1980000, 2619000, 5120, 52428800, 0x2330},
    {"H200", 9, 0, 1980000, 3201000, 6144, 52428800, 0x2335},
    {"H800", 9, 0, 1980000, 2619000, 5120, 52428800, 0x2324},
    {"H20", 9, 0, 1980000, 2619000, 6144, 62914560, 0x2329},
    {"L40", 8, 9, 2490000, 9001000, 384, 100663296, 0x26b5},
    {"L4", 8, 9, 2040000, 6251000, 192, 50331648, 0x27b8},
    {"A100-SXM4-80GB", 8, 0, 1410000, 1593000, 5120, 41943040, 0x20b2},
    {"A100 80GB", 8, 0, 1410000, 1512000, 5120, 41943040, 0x20b5},
    {"A100", 8, 0, 1410000, 1215000, 5120, 41943040, 0x20b0},
    {"A800", 8, 0, 1410000, 1593000, 5120, 41943040, 0x20f3},
    {"A30", 8, 0, 1440000, 1215000, 3072, 25165824, 0x20b7},
    {"A10", 8, 6, 1695000, 6251000, 384, 6291456, 0x2236},
    {"T4", 7, 5, 1590000, 5001000, 256, 4194304, 0x1eb8},
    {"V100", 7, 0, 1530000, 877000, 4096, 6291456, 0x1db1},
    {"P100", 6, 0, 1480000, 715000, 4096, 4194304, 0x15f8},
    {"P4", 6, 1, 1531000, 3003000, 256, 2097152, 0x1bb3},
};

const struct sim_model *sim_model_of(const char *name)
{
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (strstr(name, models[i].key))
            return &models[i];
    return &models[9]; /* "A100" */
}
