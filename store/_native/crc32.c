/* CRC-32 (IEEE 802.3 polynomial 0x04C11DB7, reflected, initial and final value all ones): the
 * value zlib's crc32() and java.util.zip.CRC32 compute, which RocketMQ's BODYCRC keeps 31 bits of.
 *
 * Two methods, chosen once at module init (crc32_init):
 * - slice-by-8: eight 256-entry tables built at init; eight bytes per step;
 * - carry-less multiplication folding (x86-64 with PCLMULQDQ, checked at run time): four 128-bit
 *   lanes of the data are folded forward 512 bits per step, then into one lane; the last lane and
 *   the bytes after it go through the tables. The folding constants are x^n mod P, computed at init.
 *
 * Folding, in the reflected order the bytes come in: a 16-byte little-endian load holds the
 * polynomial H*x^64 + L, H's 64 coefficients in the low quadword (bit i: x^(63-i)). Moving it
 * D bits forward is H*x^(D+64) + L*x^D, congruent mod P to H*(x^(D+64) mod P) + L*(x^D mod P),
 * under 96 bits. A carry-less product of two such reflected quadwords comes out one bit short
 * (bit m of the product is x^(126-m)), so the constants are taken one power lower:
 * x^(D+63) mod P and x^(D-1) mod P.
 */
#include "kernels.h"

#include <string.h>

#define CRC_POLY_NORMAL 0x04C11DB7u   /* x^32 + ... as the low 32 coefficients, x^31 at bit 31 */
#define CRC_POLY_REFLECTED 0xEDB88320u /* the same, bit i holding x^(31-i) */
#define FOLD_MIN_BYTES 64             /* shorter inputs go through the tables only */

static uint32_t tables[8][256];
static int use_fold;

static void build_tables(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t r = b;
        for (int k = 0; k < 8; k++) r = (r >> 1) ^ ((r & 1u) ? CRC_POLY_REFLECTED : 0u);
        tables[0][b] = r;
    }
    for (int t = 1; t < 8; t++)
        for (int b = 0; b < 256; b++) tables[t][b] = (tables[t - 1][b] >> 8) ^ tables[0][tables[t - 1][b] & 0xFF];
}

static uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* The register (not complemented) after p[0..n). */
static uint32_t table_update(uint32_t reg, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint32_t a = reg ^ load_le32(p), b = load_le32(p + 4);
        reg = tables[7][a & 0xFF] ^ tables[6][(a >> 8) & 0xFF] ^ tables[5][(a >> 16) & 0xFF] ^ tables[4][a >> 24] ^
              tables[3][b & 0xFF] ^ tables[2][(b >> 8) & 0xFF] ^ tables[1][(b >> 16) & 0xFF] ^ tables[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) reg = tables[0][(reg ^ *p++) & 0xFF] ^ (reg >> 8);
    return reg;
}

uint32_t crc32_portable(uint32_t crc, const uint8_t *p, size_t n) { return ~table_update(~crc, p, n); }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static __m128i fold_512, fold_128; /* (x^(D+63) mod P, x^(D-1) mod P) reflected, D = 512 and 128 */

/* x^n mod P, coefficient d at bit d. */
static uint32_t x_pow_mod(unsigned n) {
    uint32_t v = 1;
    for (unsigned i = 0; i < n; i++) v = (v << 1) ^ ((v & 0x80000000u) ? CRC_POLY_NORMAL : 0u);
    return v;
}

/* A remainder as a reflected quadword: coefficient d at bit 63-d. */
static long long reflected64(uint32_t v) {
    uint32_t r = 0;
    for (int i = 0; i < 32; i++) r |= ((v >> i) & 1u) << (31 - i);
    return (long long)((uint64_t)r << 32);
}

__attribute__((target("sse2"))) static __m128i fold_constants(unsigned d) {
    return _mm_set_epi64x(reflected64(x_pow_mod(d - 1)), reflected64(x_pow_mod(d + 63)));
}

__attribute__((target("pclmul,sse2"))) static __m128i fold(__m128i x, __m128i k, const uint8_t *next) {
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00), hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), _mm_loadu_si128((const __m128i *)next));
}

__attribute__((target("pclmul,sse2"))) static __m128i fold_into(__m128i x, __m128i k, __m128i into) {
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00), hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), into);
}

/* n >= FOLD_MIN_BYTES. */
__attribute__((target("pclmul,sse2"))) static uint32_t fold_update(uint32_t reg, const uint8_t *p, size_t n) {
    __m128i x[4];
    for (int i = 0; i < 4; i++) x[i] = _mm_loadu_si128((const __m128i *)(p + 16 * i));
    x[0] = _mm_xor_si128(x[0], _mm_cvtsi32_si128((int)reg)); /* the register enters as the first 4 bytes */
    p += 64;
    n -= 64;
    for (; n >= 64; p += 64, n -= 64)
        for (int i = 0; i < 4; i++) x[i] = fold(x[i], fold_512, p + 16 * i);
    __m128i s = fold_into(fold_into(fold_into(x[0], fold_128, x[1]), fold_128, x[2]), fold_128, x[3]);
    for (; n >= 16; p += 16, n -= 16) s = fold(s, fold_128, p);
    uint8_t last[16];
    _mm_storeu_si128((__m128i *)last, s);
    return table_update(table_update(0, last, 16), p, n);
}

static int fold_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
}

uint32_t crc32_ieee(uint32_t crc, const uint8_t *p, size_t n) {
    if (use_fold && n >= FOLD_MIN_BYTES) return ~fold_update(~crc, p, n);
    return crc32_portable(crc, p, n);
}

void crc32_init(void) {
    build_tables();
    fold_512 = fold_constants(512);
    fold_128 = fold_constants(128);
    use_fold = fold_supported();
}
#else
uint32_t crc32_ieee(uint32_t crc, const uint8_t *p, size_t n) { return crc32_portable(crc, p, n); }

void crc32_init(void) {
    build_tables();
    use_fold = 0;
}
#endif

int crc32_method(void) { return use_fold ? 2 : 1; }
