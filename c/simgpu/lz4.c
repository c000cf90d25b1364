/* LZ4 block decompression (the format is public: lz4's lz4_Block_format.md), for fat binary
 * entries compressed with nvcc's default compression. */
#include <string.h>

#include "image.h"

/* A length field: the 4-bit value, extended by bytes while they are 255. */
static int read_length(const uint8_t **p, const uint8_t *end, size_t *len)
{
    if (*len != 15)
        return 0;
    uint8_t b;
    do {
        if (*p >= end)
            return -1;
        b = *(*p)++;
        *len += b;
    } while (b == 255);
    return 0;
}

long sim_lz4_unpack(const uint8_t *src, size_t srclen, uint8_t *dst, size_t dstlen)
{
    const uint8_t *p = src, *end = src + srclen;
    size_t out = 0;
    while (p < end) {
        uint8_t token = *p++;
        size_t lit = token >> 4, match = token & 15;
        if (read_length(&p, end, &lit) < 0 || lit > (size_t)(end - p) || lit > dstlen - out)
            return -1;
        memcpy(dst + out, p, lit);
        p += lit;
        out += lit;
        if (p == end)
            break; /* the last sequence has literals only */
        if (end - p < 2)
            return -1;
        size_t offset = (size_t)p[0] | (size_t)p[1] << 8;
        p += 2;
        if (offset == 0 || offset > out || read_length(&p, end, &match) < 0)
            return -1;
        match += 4;
        if (match > dstlen - out)
            return -1;
        for (size_t i = 0; i < match; i++, out++) /* may overlap: byte by byte */
            dst[out] = dst[out - offset];
    }
    return (long)out;
}
