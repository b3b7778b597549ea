/* quant_formats.h — the GGUF block layouts (private to src/quant).
 *
 * Every struct is byte-for-byte the on-disk block; sizes are checked against
 * the type table with static_assert. f16 fields are raw IEEE half bits.
 *
 *   legacy blocks: 32 elements; element j of the block lives in qs[j] (low
 *   nibble) for j < 16 and in qs[j-16] (high nibble) for j >= 16.
 *   K-quants: super-blocks of 256 elements with 6/8-bit sub-block scales.
 */
#ifndef HX_QUANT_FORMATS_H
#define HX_QUANT_FORMATS_H

#include "core/core.h"
#include "quant/quant.h"

#include <assert.h>
#include <string.h>

#define QK4_0 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;                  /* x = d*(q-8) */
typedef struct { uint16_t d, m; uint8_t qs[QK4_0 / 2]; } block_q4_1;               /* x = d*q + m */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK4_0 / 2]; } block_q5_0;   /* x = d*(q-16), bit 4 in qh */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK4_0 / 2]; } block_q5_1;/* x = d*q + m */
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;                       /* x = d*q */
typedef struct { uint16_t d, s; int8_t qs[QK8_0]; } block_q8_1;                    /* s = d*sum(q) */

/* Q2_K: 16 sub-blocks of 16; scales[j] = (min4 << 4) | scale4; x = d*sc*q - dmin*m */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; } block_q2_K;
/* Q3_K: 16 sub-blocks of 16, 6-bit signed scales (-32 offset); q = low2 | hmask bit<<2, x = d*sc*(q-4) */
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; } block_q3_K;
/* Q4_K: 8 sub-blocks of 32, 6-bit scale and min each packed in 12 bytes; x = d*sc*q - dmin*m */
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
/* Q5_K: as Q4_K plus one high bit per element in qh */
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
/* Q6_K: 16 sub-blocks of 16, int8 scales; q = low4 (ql) | high2 (qh) << 4, x = d*sc*(q-32) */
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_K;
/* Q8_K (activations only): f32 scale, bsums[j] = sum of qs[16j..16j+16) */
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;

static_assert(sizeof(block_q4_0) == 18, "q4_0");
static_assert(sizeof(block_q4_1) == 20, "q4_1");
static_assert(sizeof(block_q5_0) == 22, "q5_0");
static_assert(sizeof(block_q5_1) == 24, "q5_1");
static_assert(sizeof(block_q8_0) == 34, "q8_0");
static_assert(sizeof(block_q8_1) == 36, "q8_1");
static_assert(sizeof(block_q2_K) == 84, "q2_K");
static_assert(sizeof(block_q3_K) == 110, "q3_K");
static_assert(sizeof(block_q4_K) == 144, "q4_K");
static_assert(sizeof(block_q5_K) == 176, "q5_K");
static_assert(sizeof(block_q6_K) == 210, "q6_K");
static_assert(sizeof(block_q8_K) == 292, "q8_K");

/* Q4_K/Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes.
 * Bytes 0-3: scales 0-3 (low 6 bits), 4-7: mins 0-3 (low 6 bits);
 * bytes 8-11: low nibbles of scales 4-7 / high nibbles of mins 4-7, whose top
 * two bits sit in the spare top bits of bytes 0-7. */
static inline void hx_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q3_K: the 16 6-bit scales (still offset by 32) from the 12 packed bytes:
 * low nibbles in bytes 0-7 (sub-blocks 0-7 low, 8-15 high nibble), the top
 * two bits of sub-block j at byte 8 + j%4, bit pair j/4. */
static inline void hx_q3k_scales(const uint8_t *s, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
        int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

static inline float hx_h2f(uint16_t h) { return hx_fp16_to_fp32(h); }

#endif
