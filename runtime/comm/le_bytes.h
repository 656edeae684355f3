/* le_bytes.h: integers in the wire's byte order (little-endian, byte by
 * byte, so alignment and the host's order do not matter): the one
 * put32/get32/put64/get64 of every header and frame the runtime writes. */
#ifndef FUSION_RT_LE_BYTES_H
#define FUSION_RT_LE_BYTES_H

#include <stdint.h>

static inline void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static inline uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

#endif
