/* Big-endian and host-order field access; callers have checked the bounds. */
#ifndef TIDEMQ_BYTES_H
#define TIDEMQ_BYTES_H

#include <stdint.h>
#include <string.h>

static inline uint32_t rd_u32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline int32_t rd_i32(const uint8_t *p) { return (int32_t)rd_u32(p); }

static inline int16_t rd_i16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

static inline int64_t rd_i64(const uint8_t *p) { return (int64_t)(((uint64_t)rd_u32(p) << 32) | rd_u32(p + 4)); }

static inline void wr_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void wr_i64(uint8_t *p, int64_t v) {
    wr_u32(p, (uint32_t)((uint64_t)v >> 32));
    wr_u32(p + 4, (uint32_t)v);
}

static inline void put_h32(uint8_t *p, int32_t v) { memcpy(p, &v, 4); }
static inline void put_h64(uint8_t *p, int64_t v) { memcpy(p, &v, 8); }
static inline int32_t get_h32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline int64_t get_h64(const uint8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Enough for any int64 in decimal, its sign included. */
#define DECIMAL_MAX_CHARS 20

/* v in decimal, written backwards ending at digits[DECIMAL_MAX_CHARS]; the index of its first character. */
static inline size_t format_decimal(int64_t v, char digits[DECIMAL_MAX_CHARS]) {
    size_t at = DECIMAL_MAX_CHARS;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[--at] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0) digits[--at] = '-';
    return at;
}

/* v's low 16 bits as four upper-case hex digits at p[0..4). */
static inline void put_hex4(uint8_t *p, uint32_t v) {
    static const char digits[] = "0123456789ABCDEF";
    for (int k = 3; k >= 0; k--) {
        p[k] = (uint8_t)digits[v & 0xF];
        v >>= 4;
    }
}

#endif
