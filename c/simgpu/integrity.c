/* The answer to the CUDA runtime's driver self-test (export table INTEGRITY_CHECK, slot 1).
 *
 * Since CUDA 12 the runtime asks the driver for a keyed digest of who is calling (runtime
 * version, driver version, process, thread, the addresses of two export tables and of the
 * answering function, a timestamp it chose) and of every device's UUID and PCI location, and
 * refuses to run (cudaErrorSoftwareValidityNotEstablished) when the digest is not the one it
 * expects. The construction is public knowledge from projects that run the real runtime on
 * other drivers: HMAC over MD2 (RFC 1319) with a fixed 16-byte key; requests whose version
 * ends in 0 or 1 get fixed answers. Everything below is written from those facts. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "cu_internal.h"
#include "cu_export.h"

/* RFC 1319's substitution table (a permutation built from the digits of pi). */
static const uint8_t md2_pi[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,
    98,  167, 5,   243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202,
    30,  155, 87,  60,  253, 212, 224, 22,  103, 66,  111, 24,  138, 23,  229, 18,
    190, 78,  196, 214, 218, 158, 222, 73,  160, 251, 245, 142, 187, 47,  238, 122,
    169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137, 11,  34,  95,  33,
    128, 127, 93,  154, 90,  144, 50,  39,  53,  62,  204, 231, 191, 247, 151, 3,
    255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,  170, 198,
    79,  184, 56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241,
    69,  157, 112, 89,  100, 113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,
    27,  96,  37,  173, 174, 176, 185, 246, 28,  70,  97,  105, 52,  64,  126, 15,
    85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249, 206, 186, 197, 234, 38,
    44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129, 77,  82,
    106, 220, 55,  200, 108, 193, 171, 250, 36,  225, 123, 8,   12,  189, 177, 74,
    120, 136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254, 59,  0,   29,  57,
    242, 239, 183, 14,  102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,
    49,  68,  80,  180, 143, 237, 31,  26,  219, 153, 141, 51,  159, 17,  131, 20,
};

struct md2 {
    uint8_t x[48];        /* state (16) | block (16) | state ^ block (16) */
    uint8_t checksum[16];
    uint8_t used;         /* bytes of the current block filled */
    uint8_t last;         /* last checksum byte written */
};

static void md2_block(struct md2 *m)
{
    uint8_t t = 0;
    for (int round = 0; round < 18; round++) {
        for (int i = 0; i < 48; i++)
            t = m->x[i] ^= md2_pi[t];
        t = (uint8_t)(t + round);
    }
}

static void md2_byte(struct md2 *m, uint8_t b)
{
    int i = m->used;
    m->x[16 + i] = b;
    m->x[32 + i] = m->x[i] ^ b;
    m->last = m->checksum[i] ^= md2_pi[b ^ m->last];
    m->used = (uint8_t)((i + 1) & 15);
    if (m->used == 0)
        md2_block(m);
}

static void md2_bytes(struct md2 *m, const void *data, size_t n, uint8_t xor_mask)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++)
        md2_byte(m, p[i] ^ xor_mask);
}

static void md2_final(struct md2 *m, uint8_t out[16])
{
    uint8_t pad = (uint8_t)(16 - m->used);
    for (int i = 0; i < pad; i++)
        md2_byte(m, pad);
    uint8_t sum[16];
    memcpy(sum, m->checksum, sizeof sum);
    for (int i = 0; i < 16; i++)
        md2_byte(m, sum[i]);
    memcpy(out, m->x, 16);
}

/* What the runtime hashes about the call, in this order and layout (48 bytes, no padding). */
struct integrity_call {
    uint32_t driver_version;
    uint32_t runtime_request;
    uint32_t pid;
    uint32_t thread;
    const void *cudart_table;
    const void *integrity_table;
    const void *function;
    uint64_t unix_seconds;
};
_Static_assert(sizeof(struct integrity_call) == 48, "integrity_call layout");

/* ... then this for every device, in ordinal order (28 bytes). */
struct integrity_device {
    uint8_t uuid[16];
    int32_t pci_domain, pci_bus, pci_device;
};
_Static_assert(sizeof(struct integrity_device) == 28, "integrity_device layout");

static const uint8_t integrity_key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                          0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

CUresult sim_integrity_answer(uint32_t request, uint64_t unix_seconds, uint64_t out[2],
                              const void *function)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (request % 10 == 0 || request % 10 == 1) {
        out[0] = request % 10 ? 0x1841181c03cb675cULL : 0x3341181c03cb675cULL;
        out[1] = 0x8ed383aa1f4cd1e8ULL;
        return CUDA_SUCCESS;
    }
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct md2 inner = {0}, outer = {0};
    md2_bytes(&inner, integrity_key, sizeof integrity_key, 0x36);
    struct integrity_call call = {
        .driver_version = (uint32_t)sim_driver_version(),
        .runtime_request = request,
        .pid = (uint32_t)getpid(),
        .thread = (uint32_t)(uintptr_t)pthread_self(),
        .cudart_table = sim_export_table_address(SIM_TABLE_CUDART),
        .integrity_table = sim_export_table_address(SIM_TABLE_INTEGRITY),
        .function = function,
        .unix_seconds = unix_seconds,
    };
    md2_bytes(&inner, &call, sizeof call, 0);
    for (int dev = 0; dev < sim_device_count(); dev++) {
        struct integrity_device d = {.pci_bus = (int32_t)sim_device(dev)->pci_bus};
        sim_device_uuid_bytes(dev, d.uuid);
        md2_bytes(&inner, &d, sizeof d, 0);
    }
    uint8_t digest[16];
    md2_final(&inner, digest);
    md2_bytes(&outer, integrity_key, sizeof integrity_key, 0x5c);
    md2_bytes(&outer, digest, sizeof digest, 0);
    md2_final(&outer, digest);
    memcpy(out, digest, sizeof digest);
    return CUDA_SUCCESS;
}
