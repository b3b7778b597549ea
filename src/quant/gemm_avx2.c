/* gemm_avx2.c — tiled quantized GEMM micro-kernels (AVX2/FMA/F16C) for the
 * weight types that matter on CPU: Q8_0, Q4_0 (x Q8_0) and Q4_K, Q6_K (x Q8_K).
 *
 * A tile is RM weight rows x RN activation rows (tokens). Per block, each
 * weight block is loaded and unpacked once and used for RN tokens; each
 * activation block is used for RM rows (from L1). Every (row, token) pair
 * has its own accumulator and sees exactly the operations of the 1x1 tile in
 * the same order, so a pair's result does not depend on the tile it sits in:
 * the per-row dot kernels of these types (hx_dot_*_avx2) ARE the 1x1 tile,
 * and matvec (RMx1), matmul (RMxRN) and hx_vec_dot agree bit for bit.
 *
 * Canonical order per pair: legacy types: acc = fma(dw*dx, float(int dot of
 * block), acc) block by block; K-quants: per super-block acc = fma(d,
 * float(sumi), acc) then (Q4_K) acc = fma(dmin, float(mins . bsums), acc);
 * the 8 lanes are summed once at the end (hsum_ps). The int32 lane sums are
 * exact, so how the integer work is split (e.g. Q6_K's -32 offset taken from
 * the Q8_K block sums) does not change the result.
 *
 * Tiles are instantiated for every RM, RN in 1..4 (edges of the matrix use the
 * smaller ones); compiled -O3 so the accumulator arrays are unrolled into
 * registers.
 *
 * Since then the tiles serve matvec (RMx1, with software prefetch) and the
 * batch path (hx_get_gemm_batch, matmul with n > 1) uses the packed kernels at
 * the end of this file for Q8_0, Q4_0, Q5_0, Q4_K, Q6_K: 8 weight rows repacked
 * per call so that one row sits in one 32-bit lane, with exact integer block
 * sums; those are bit-identical to the scalar per-row kernels instead. */
#include "quant/dot.h"
#include "quant/simd_avx2.h"

#include <stdlib.h>

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

#define DOT_U8S8(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
#define Q4_OFFSET(xv) _mm256_maddubs_epi16(_mm256_set1_epi8(8), xv)
#define Q4_DOT(wq, xv, m8) _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(wq, xv), m8), _mm256_set1_epi16(1))
#include "quant/gemm_tiles.h"

/* ------------------------------------------------------------------ Q4_K */

AI void tile_q4_K(const int RM, const int RN, int64_t nb, const uint8_t *w, size_t ldw, const uint8_t *x,
                  size_t ldx, float *y, size_t ldy) {
    __m256 acc[4][4];
    UNROLL for (int r = 0; r < RM; r++) UNROLL for (int c = 0; c < RN; c++) acc[r][c] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0xF);
    PF_SETUP()
    for (int64_t i = 0; i < nb; i++) {
        PF(sizeof(block_q4_K), i)
        __m128i sm[4];
        __m256i sc[4], sumi[4][4];
        UNROLL for (int r = 0; r < RM; r++) {
            const block_q4_K *a = (const block_q4_K *)(w + r * ldw) + i;
            sm[r] = k4_scales_mins(a->scales);
            /* the 8 int16 scales in both 128-bit halves */
            sc[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm[r]));
            UNROLL for (int c = 0; c < RN; c++) sumi[r][c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 4; j++) {
            UNROLL for (int r = 0; r < RM; r++) {
                const block_q4_K *a = (const block_q4_K *)(w + r * ldw) + i;
                const __m256i bits = loadu256(a->qs + 32 * j);
                const __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                const __m256i slo = _mm256_shuffle_epi8(sc[r], bcast16(2 * j));
                const __m256i shi = _mm256_shuffle_epi8(sc[r], bcast16(2 * j + 1));
                UNROLL for (int c = 0; c < RN; c++) {
                    const int8_t *q8 = ((const block_q8_K *)(x + c * ldx) + i)->qs + 64 * j;
                    const __m256i pl = _mm256_madd_epi16(slo, _mm256_maddubs_epi16(lo, loadu256(q8)));
                    const __m256i ph = _mm256_madd_epi16(shi, _mm256_maddubs_epi16(hi, loadu256(q8 + 32)));
                    sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_add_epi32(pl, ph));
                }
            }
        }
        UNROLL for (int r = 0; r < RM; r++) {
            const block_q4_K *a = (const block_q4_K *)(w + r * ldw) + i;
            const float ad = f16(a->d), am = f16(a->dmin);
            UNROLL for (int c = 0; c < RN; c++) {
                const block_q8_K *b = (const block_q8_K *)(x + c * ldx) + i;
                const float d = b->d * ad, dmin = -b->d * am;
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[r][c]), acc[r][c]);
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(k4_mins_dot(sm[r], b->bsums)),
                                            acc[r][c]);
            }
        }
    }
    UNROLL for (int r = 0; r < RM; r++) UNROLL for (int c = 0; c < RN; c++) y[c * ldy + r] = hsum_ps(acc[r][c]);
}

/* ------------------------------------------------------------------ Q6_K */

/* Levels q in [0, 63] go unsigned into maddubs; the -32 offset is taken once
 * per super-block from the Q8_K block sums: sum_s sc_s * 32 * bsum_s. */
AI void tile_q6_K(const int RM, const int RN, int64_t nb, const uint8_t *w, size_t ldw, const uint8_t *x,
                  size_t ldx, float *y, size_t ldy) {
    __m256 acc[4][4];
    UNROLL for (int r = 0; r < RM; r++) UNROLL for (int c = 0; c < RN; c++) acc[r][c] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    PF_SETUP()
    for (int64_t i = 0; i < nb; i++) {
        PF(sizeof(block_q6_K), i)
        __m256i sumi[4][4];
        UNROLL for (int r = 0; r < RM; r++) UNROLL for (int c = 0; c < RN; c++) sumi[r][c] = _mm256_setzero_si256();
        for (int j = 0; j < 2; j++) {
            UNROLL for (int r = 0; r < RM; r++) {
                const block_q6_K *a = (const block_q6_K *)(w + r * ldw) + i;
                const uint8_t *ql = a->ql + 64 * j, *qh = a->qh + 32 * j;
                /* int16 scales of this half's 8 sub-blocks in both 128-bit halves */
                const __m128i s16 = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(a->scales + 8 * j)));
                const __m256i scales = _mm256_set_m128i(s16, s16);
                const __m256i b1 = loadu256(ql), b2 = loadu256(ql + 32), bh = loadu256(qh);
                __m256i q[4];
                q[0] = _mm256_or_si256(_mm256_and_si256(b1, m4), _mm256_slli_epi16(_mm256_and_si256(bh, m2), 4));
                q[1] = _mm256_or_si256(_mm256_and_si256(b2, m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 2), m2), 4));
                q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 4), m2), 4));
                q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 6), m2), 4));
                __m256i s[4];
                UNROLL for (int k = 0; k < 4; k++) s[k] = _mm256_shuffle_epi8(scales, bcast16_pair(k));
                UNROLL for (int c = 0; c < RN; c++) {
                    const int8_t *q8 = ((const block_q8_K *)(x + c * ldx) + i)->qs + 128 * j;
                    __m256i p[4];
                    UNROLL for (int k = 0; k < 4; k++)
                        p[k] = _mm256_madd_epi16(s[k], _mm256_maddubs_epi16(q[k], loadu256(q8 + 32 * k)));
                    sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]),
                                                                               _mm256_add_epi32(p[2], p[3])));
                }
            }
        }
        UNROLL for (int r = 0; r < RM; r++) {
            const block_q6_K *a = (const block_q6_K *)(w + r * ldw) + i;
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a->scales));
            const float ad = f16(a->d);
            UNROLL for (int c = 0; c < RN; c++) {
                const block_q8_K *b = (const block_q8_K *)(x + c * ldx) + i;
                const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc16, loadu256(b->bsums)), 5);
                const __m256i si = _mm256_sub_epi32(sumi[r][c], off);
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(b->d * ad), _mm256_cvtepi32_ps(si), acc[r][c]);
            }
        }
    }
    UNROLL for (int r = 0; r < RM; r++) UNROLL for (int c = 0; c < RN; c++) y[c * ldy + r] = hsum_ps(acc[r][c]);
}

/* Q4_K matvec in the order of llama.cpp's repacked gemv (hx_dot_q4_K_ggml_gemv_avx2): per
 * row and super-block the exact isum and imin (the 8 int32 lanes of the usual maddubs /
 * madd sums, added across lanes in any order: integers), then acc = fma(isum, dw * bd, acc),
 * accm = fma(imin, dmin * bd, accm) with the RM rows in the lanes of one __m128; result
 * acc - accm. RM rows share each activation load, and the rows of the tile PF_TILES ahead
 * are prefetched as the other matvec tiles do (gemm_tiles.h). */
static inline __m128i hsum4_epi32(const __m256i v[4]) {
    const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1)); /* lane r = sum of v[r] */
}
AI void tile_q4_K_gemv(const int RM, int64_t nb, const uint8_t *w, size_t ldw, const uint8_t *x, float *y) {
    const int RN = 1;
    __m128 acc = _mm_setzero_ps(), accm = _mm_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0xF);
    PF_SETUP()
    for (int64_t i = 0; i < nb; i++) {
        PF(sizeof(block_q4_K), i)
        const block_q8_K *b = (const block_q8_K *)x + i;
        __m256i vs[4], vm[4];
        float dw[4] = {0}, dmw[4] = {0};
        UNROLL for (int r = 0; r < 4; r++) {
            if (r >= RM) { vs[r] = vm[r] = _mm256_setzero_si256(); continue; }
            const block_q4_K *a = (const block_q4_K *)(w + r * ldw) + i;
            const __m128i sm = k4_scales_mins(a->scales);
            const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
            __m256i s = _mm256_setzero_si256();
            UNROLL for (int j = 0; j < 4; j++) {
                const __m256i bits = loadu256(a->qs + 32 * j);
                const __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                const __m256i pl = _mm256_madd_epi16(_mm256_shuffle_epi8(sc, bcast16(2 * j)),
                                                     _mm256_maddubs_epi16(lo, loadu256(b->qs + 64 * j)));
                const __m256i ph = _mm256_madd_epi16(_mm256_shuffle_epi8(sc, bcast16(2 * j + 1)),
                                                     _mm256_maddubs_epi16(hi, loadu256(b->qs + 64 * j + 32)));
                s = _mm256_add_epi32(s, _mm256_add_epi32(pl, ph));
            }
            vs[r] = s;
            vm[r] = k4_mins_dot(sm, b->bsums);
            dw[r] = f16(a->d);
            dmw[r] = f16(a->dmin);
        }
        const __m128 bd = _mm_set1_ps(b->d);
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum4_epi32(vs)), _mm_mul_ps(_mm_loadu_ps(dw), bd), acc);
        accm = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum4_epi32(vm)), _mm_mul_ps(_mm_loadu_ps(dmw), bd), accm);
    }
    float o[4];
    _mm_storeu_ps(o, _mm_sub_ps(acc, accm));
    for (int r = 0; r < RM; r++) y[r] = o[r];
}
#define GV(M)                                                                                                     \
    static void q4_K_gemv_##M(int64_t nb, const uint8_t *w, size_t ldw, const uint8_t *x, float *y) {            \
        tile_q4_K_gemv(M, nb, w, ldw, x, y);                                                                      \
    }
GV(1) GV(2) GV(3) GV(4)

/* nr rows against one token in the gemv order, 4 rows per tile */
static void q4_K_gemv_rows(int64_t n, int64_t nr, const void *w, size_t ldw, const void *x, float *y) {
    static void (*const t[4])(int64_t, const uint8_t *, size_t, const uint8_t *, float *) = {
        q4_K_gemv_1, q4_K_gemv_2, q4_K_gemv_3, q4_K_gemv_4 };
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        const int rm = (int)(nr - r0 < 4 ? nr - r0 : 4);
        t[rm - 1](n / QK_K, (const uint8_t *)w + r0 * ldw, ldw, x, y + r0);
    }
}

TILES(q8_0)
TILES(q5_0)
TILES(q4_0)
TILES(q4_K)
TILES(q6_K)

/* Tile shape per type for batches (MR rows x NR tokens) and for matvec (MV
 * rows). Measured on Zen 3 (one thread, 96x1024 weights in L2, 48 tokens,
 * GFLOP/s, 1x1 / 2x4 / 3x4 / 4x4): Q8_0 33 / 50 / 55 / 56, Q4_0 28 / 53 / 58
 * / 59, Q4_K 47 / 72 / 74 / 73, Q6_K 44 / 94 / 96 / 96; matvec 1 / 2 / 4 rows:
 * Q8_0 40 / 48 / 51, Q4_0 37 / 44 / 49. */
typedef struct { const tile_fn (*t)[4]; int bs, mr, nr, mv; } gemm_kind;
static gemm_kind kinds[4] = {
    { tiles_q8_0, QK8_0, 4, 4, 4 },
    { tiles_q4_0, QK4_0, 4, 4, 4 },
    { tiles_q4_K, QK_K, 3, 4, 4 },
    { tiles_q6_K, QK_K, 3, 4, 4 },
};

static void drive(const gemm_kind *k, int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                  size_t ldx, float *y, size_t ldy) {
    const int64_t nb = n / k->bs;
    const int mr = nc == 1 ? k->mv : k->mr, nr_ = nc == 1 ? 1 : k->nr;
    for (int64_t r0 = 0; r0 < nr; r0 += mr) {
        const int rm = (int)(nr - r0 < mr ? nr - r0 : mr);
        for (int64_t c0 = 0; c0 < nc; c0 += nr_) {
            const int cn = (int)(nc - c0 < nr_ ? nc - c0 : nr_);
            k->t[rm - 1][cn - 1](nb, (const uint8_t *)w + r0 * ldw, ldw, (const uint8_t *)x + c0 * ldx, ldx,
                                 y + c0 * ldy + r0, ldy);
        }
    }
}

static gemm_kind kind_q5_0 = { tiles_q5_0, QK4_0, 4, 4, 4 }; /* 32-element blocks */
void hx_gemm_q5_0_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x, size_t ldx,
                       float *y, size_t ldy) {
    drive(&kind_q5_0, n, nr, nc, w, ldw, x, ldx, y, ldy);
}
void hx_gemm_q8_0_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x, size_t ldx,
                       float *y, size_t ldy) {
    drive(&kinds[0], n, nr, nc, w, ldw, x, ldx, y, ldy);
}
void hx_gemm_q4_0_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x, size_t ldx,
                       float *y, size_t ldy) {
    drive(&kinds[1], n, nr, nc, w, ldw, x, ldx, y, ldy);
}
void hx_gemm_q4_K_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x, size_t ldx,
                       float *y, size_t ldy) {
    drive(&kinds[2], n, nr, nc, w, ldw, x, ldx, y, ldy);
}
void hx_gemm_q6_K_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x, size_t ldx,
                       float *y, size_t ldy) {
    drive(&kinds[3], n, nr, nc, w, ldw, x, ldx, y, ldy);
}

/* Benchmark knob: tile shape per type ("MRxNR[:MV]"), e.g. from HX_GEMM_TILE. */
void hx_gemm_avx2_set_tile(int which, int mr, int nr, int mv) {
    if (which < 0 || which > 3) return;
    if (mr >= 1 && mr <= 4) kinds[which].mr = mr;
    if (nr >= 1 && nr <= 4) kinds[which].nr = nr;
    if (mv >= 1 && mv <= 4) kinds[which].mv = mv;
}

/* the per-row kernels: the 1x1 tile */
void hx_dot_q8_0_avx2(int64_t n, float *out, const void *w, const void *x) {
    q8_0_1x1(n / QK8_0, w, 0, x, 0, out, 0);
}
void hx_dot_q4_0_avx2(int64_t n, float *out, const void *w, const void *x) {
    q4_0_1x1(n / QK4_0, w, 0, x, 0, out, 0);
}
void hx_dot_q4_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    q4_K_1x1(n / QK_K, w, 0, x, 0, out, 0);
}
void hx_dot_q6_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    q6_K_1x1(n / QK_K, w, 0, x, 0, out, 0);
}

/* ------------------------------------------- Q4_0 batch GEMM, packed rows
 *
 * For batches (prefill) the tiles above spend 6 vector ops per (row, token,
 * block): maddubs, offset, madd, cvt, scale, fma. Here one vector lane holds
 * one weight row instead: a group of 8 rows is repacked per call so that the
 * 32-bit lane r of step vector j holds row r's levels 4j..4j+3 (minus 8, as
 * s8), and the token's 4 activation bytes of that step are broadcast to all
 * lanes. 8 steps of maddubs + int16 add give each row's block sum in its own
 * lane, no horizontal sums: ~21 ops per (8 rows, token, block).
 *
 * maddubs wants the unsigned operand first, so the activations go in as
 * x + 128 (u8) and the weights as q - 8 (s8): sum (x+128)(q-8) = sum x(q-8)
 * + 128 sum (q-8); the second term is per (row, block) and subtracted from
 * the int32 sum. Range: |(x+128)(q-8)| <= 255 * 8 = 2040, a pair <= 4080, 8
 * steps <= 32640 < 32767, so the int16 accumulator cannot overflow (maddubs
 * cannot saturate either). The block sum is exact, and the float part is the
 * scalar kernel's: s += (float)sumi * (dw * dx), mul then add (no contraction
 * under -std=c17), so every output is bit-identical to hx_dot_q4_0_scalar. */
typedef struct {
    __m256i q[8];   /* step j: lane r = levels 4j..4j+3 of row r, minus 8 */
    __m256i corr;   /* lane r: 128 * sum of row r's (q - 8) */
    __m256 d;       /* lane r: row r's block scale */
} q4_0_pack;

static void pack_q4_0(q4_0_pack *p, int64_t nb, const uint8_t *w, size_t ldw, int rows) {
    const __m256i eight = _mm256_set1_epi8(8), ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < nb; i++) {
        __m256i v[8];
        float d[8];
        for (int r = 0; r < 8; r++) {
            if (r < rows) {
                const block_q4_0 *a = (const block_q4_0 *)(w + r * ldw) + i;
                v[r] = _mm256_sub_epi8(unpack_nibbles(a->qs), eight);
                d[r] = f16(a->d);
            } else {
                v[r] = _mm256_setzero_si256();
                d[r] = 0.f;
            }
        }
        transpose8x32(v, p[i].q);
        __m256i sum = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(ones8, p[i].q[j]));
        p[i].corr = _mm256_slli_epi32(_mm256_madd_epi16(sum, ones16), 7);
        p[i].d = _mm256_loadu_ps(d);
    }
}

/* RN tokens against one packed group; xs: (x + 128) bytes, dx: scales, both [token][block] */
AI void q4_0_packed_tile(const int RN, const int H, int64_t nb, const q4_0_pack *p, const uint8_t *xs,
                         const float *dx, float *acc_out) {
    __m256 acc[4];
    UNROLL for (int c = 0; c < RN; c++) acc[c] = _mm256_setzero_ps();
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < nb; i++) {
        __m256i s16[4], s32[4];
        UNROLL for (int c = 0; c < RN; c++) s32[c] = _mm256_setzero_si256();
        UNROLL for (int h = 0; h < 8; h += H) { /* H steps per int16 accumulation */
            UNROLL for (int c = 0; c < RN; c++) s16[c] = _mm256_setzero_si256();
            UNROLL for (int j = h; j < h + H; j++) {
                const __m256i wq = p[i].q[j];
                UNROLL for (int c = 0; c < RN; c++) {
                    int32_t b;
                    memcpy(&b, xs + ((size_t)c * nb + i) * 32 + 4 * j, 4);
                    s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(_mm256_set1_epi32(b), wq));
                }
            }
            UNROLL for (int c = 0; c < RN; c++) s32[c] = _mm256_add_epi32(s32[c], _mm256_madd_epi16(s16[c], ones16));
        }
        UNROLL for (int c = 0; c < RN; c++) {
            const __m256i si = _mm256_sub_epi32(s32[c], p[i].corr);
            const __m256 d = _mm256_mul_ps(p[i].d, _mm256_set1_ps(dx[(size_t)c * nb + i]));
            acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_cvtepi32_ps(si), d));
        }
    }
    UNROLL for (int c = 0; c < RN; c++) _mm256_storeu_ps(acc_out + 8 * c, acc[c]);
}

#define Q40_PT(N, H, T)                                                                                           \
    static void T##_packed_##N(int64_t nb, const q4_0_pack *p, const uint8_t *xs, const float *dx, float *o) {    \
        q4_0_packed_tile(N, H, nb, p, xs, dx, o);                                                                 \
    }
Q40_PT(1, 8, q4_0) Q40_PT(2, 8, q4_0) Q40_PT(3, 8, q4_0) Q40_PT(4, 8, q4_0)
Q40_PT(1, 4, q5_0) Q40_PT(2, 4, q5_0) Q40_PT(3, 4, q5_0) Q40_PT(4, 4, q5_0)

/* Q5_0 in the same packed form: levels q - 16 in [-16, 15]; with x + 128 a
 * pair is <= 2 * 255 * 16 = 8160, so the int16 accumulator takes 4 steps
 * (<= 32640) before a madd: H = 4. corr = 128 * sum(q - 16). */
static void pack_q5_0(q4_0_pack *p, int64_t nb, const uint8_t *w, size_t ldw, int rows) {
    const __m256i sixteen = _mm256_set1_epi8(16), ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < nb; i++) {
        __m256i v[8];
        float d[8];
        for (int r = 0; r < 8; r++) {
            if (r < rows) {
                const block_q5_0 *a = (const block_q5_0 *)(w + r * ldw) + i;
                const __m256i hb = _mm256_and_si256(bytes_from_bits(a->qh), sixteen);
                v[r] = _mm256_sub_epi8(_mm256_or_si256(unpack_nibbles(a->qs), hb), sixteen);
                d[r] = f16(a->d);
            } else {
                v[r] = _mm256_setzero_si256();
                d[r] = 0.f;
            }
        }
        transpose8x32(v, p[i].q);
        __m256i sum = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(ones8, p[i].q[j]));
        p[i].corr = _mm256_slli_epi32(_mm256_madd_epi16(sum, ones16), 7);
        p[i].d = _mm256_loadu_ps(d);
    }
}

typedef void (*q4_0_pack_fn)(q4_0_pack *, int64_t, const uint8_t *, size_t, int);
typedef void (*q4_0_tile_fn)(int64_t, const q4_0_pack *, const uint8_t *, const float *, float *);
static void gemm_packed_legacy(q4_0_pack_fn pack, const q4_0_tile_fn tiles[4], hx_vec_dot_fn scalar, int64_t n,
                               int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x, size_t ldx,
                               float *y, size_t ldy);

/* Same contract as hx_gemm_q4_0_avx2 but bit-identical to the scalar kernel
 * (not to the AVX2 per-row one): for batches. If its scratch cannot be
 * allocated it computes the pairs with the scalar kernel (same bits, slower). */
void hx_gemm_q4_0_packed_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                              size_t ldx, float *y, size_t ldy) {
    static const q4_0_tile_fn tiles[4] = { q4_0_packed_1, q4_0_packed_2, q4_0_packed_3, q4_0_packed_4 };
    gemm_packed_legacy(pack_q4_0, tiles, hx_dot_q4_0_scalar, n, nr, nc, w, ldw, x, ldx, y, ldy);
}
/* the same for Q5_0, bit-identical to hx_dot_q5_0_scalar */
void hx_gemm_q5_0_packed_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                              size_t ldx, float *y, size_t ldy) {
    static const q4_0_tile_fn tiles[4] = { q5_0_packed_1, q5_0_packed_2, q5_0_packed_3, q5_0_packed_4 };
    gemm_packed_legacy(pack_q5_0, tiles, hx_dot_q5_0_scalar, n, nr, nc, w, ldw, x, ldx, y, ldy);
}

static void gemm_packed_legacy(q4_0_pack_fn pack, const q4_0_tile_fn tiles[4], hx_vec_dot_fn scalar, int64_t n,
                               int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x, size_t ldx,
                               float *y, size_t ldy) {
    const int64_t nb = n / QK4_0;
    q4_0_pack *p = aligned_alloc(32, sizeof(q4_0_pack) * (size_t)nb);
    uint8_t *xs = aligned_alloc(32, (size_t)(nc * nb * 32 + 32));
    float *dx = malloc(sizeof(float) * (size_t)(nc * nb));
    if (!p || !xs || !dx) {
        free(p); free(xs); free(dx);
        for (int64_t c = 0; c < nc; c++)
            for (int64_t r = 0; r < nr; r++)
                scalar(n, &y[c * ldy + r], (const uint8_t *)w + r * ldw, (const uint8_t *)x + c * ldx);
        return;
    }
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int64_t c = 0; c < nc; c++) {
        const block_q8_0 *b = (const block_q8_0 *)((const uint8_t *)x + c * ldx);
        for (int64_t i = 0; i < nb; i++) {
            _mm256_store_si256((__m256i *)(xs + (c * nb + i) * 32), _mm256_xor_si256(loadu256(b[i].qs), bias));
            dx[c * nb + i] = f16(b[i].d);
        }
    }
    for (int64_t r0 = 0; r0 < nr; r0 += 8) {
        const int rows = (int)(nr - r0 < 8 ? nr - r0 : 8);
        pack(p, nb, (const uint8_t *)w + r0 * ldw, ldw, rows);
        for (int64_t c0 = 0; c0 < nc; c0 += 4) {
            const int cn = (int)(nc - c0 < 4 ? nc - c0 : 4);
            float o[32];
            tiles[cn - 1](nb, p, xs + c0 * nb * 32, dx + c0 * nb, o);
            for (int c = 0; c < cn; c++) memcpy(y + (c0 + c) * ldy + r0, o + 8 * c, sizeof(float) * rows);
        }
    }
    free(p); free(xs); free(dx);
}

/* ------------------------------------------- Q4_K batch GEMM, packed rows
 *
 * The Q4_0 scheme above for Q4_K: per 8-row group and super-block, the levels
 * of each 32-element sub-block j are transposed to one row per 32-bit lane
 * (u8, 0..15, the unsigned maddubs operand; the Q8_K activations are s8 as
 * stored and broadcast 4 bytes per step). Per (row, sub-block) the int16
 * accumulator holds two partial sums (<= 8 steps * 2 * 15 * 128 = 30720, no
 * overflow); one madd with the row's scale (as an int16 pair) gives
 * sc * sumi in int32. The mins term sum_j m_j * (bsum 2j + bsum 2j+1) is 4
 * madds of (m_j, m_j+1) int16 pairs against the token's pair sums. Both
 * integer sums are exact and the float part is the scalar kernel's:
 * s += bd * (dw * (float)sum_sc - dmin * (float)sum_m), so every output is
 * bit-identical to hx_dot_q4_K_scalar. */
typedef struct {
    __m256i q[8][8];  /* sub-block j, step k: lane r = levels 4k..4k+3 of row r */
    __m256i sc[8];    /* sub-block j: lane r = (sc, sc) as int16 */
    __m256i mn[4];    /* lane r = (m 2k, m 2k+1) as int16 */
    __m256 d, dmin;
} q4_K_pack;

static void pack_q4_K(q4_K_pack *p, int64_t nb, const uint8_t *w, size_t ldw, int rows) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int64_t i = 0; i < nb; i++) {
        int32_t sc[8][8], mn[4][8];
        float d[8], dmin[8];
        for (int r = 0; r < 8; r++) {
            uint8_t sm[16] = {0};
            d[r] = dmin[r] = 0.f;
            if (r < rows) {
                const block_q4_K *a = (const block_q4_K *)(w + r * ldw) + i;
                _mm_storeu_si128((__m128i *)sm, k4_scales_mins(a->scales));
                d[r] = f16(a->d);
                dmin[r] = f16(a->dmin);
            }
            for (int j = 0; j < 8; j++) sc[j][r] = (int32_t)(sm[j] * 0x10001u);
            for (int k = 0; k < 4; k++) mn[k][r] = (int32_t)(sm[8 + 2 * k] | (uint32_t)sm[9 + 2 * k] << 16);
        }
        for (int jp = 0; jp < 4; jp++) {
            __m256i lo[8], hi[8];
            for (int r = 0; r < 8; r++) {
                if (r < rows) {
                    const block_q4_K *a = (const block_q4_K *)(w + r * ldw) + i;
                    const __m256i bits = loadu256(a->qs + 32 * jp);
                    lo[r] = _mm256_and_si256(bits, m4);
                    hi[r] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                } else {
                    lo[r] = hi[r] = _mm256_setzero_si256();
                }
            }
            transpose8x32(lo, p[i].q[2 * jp]);
            transpose8x32(hi, p[i].q[2 * jp + 1]);
        }
        for (int j = 0; j < 8; j++) p[i].sc[j] = _mm256_loadu_si256((const __m256i *)sc[j]);
        for (int k = 0; k < 4; k++) p[i].mn[k] = _mm256_loadu_si256((const __m256i *)mn[k]);
        p[i].d = _mm256_loadu_ps(d);
        p[i].dmin = _mm256_loadu_ps(dmin);
    }
}

void hx_q8_K_pair_sums(int32_t *sp, const void *x, size_t ldx, int64_t nc, int64_t nb) {
    for (int64_t c = 0; c < nc; c++) {
        const block_q8_K *b = (const block_q8_K *)((const uint8_t *)x + c * ldx);
        for (int64_t i = 0; i < nb; i++)
            for (int k = 0; k < 4; k++) {
                const int s0 = b[i].bsums[4 * k] + b[i].bsums[4 * k + 1];
                const int s1 = b[i].bsums[4 * k + 2] + b[i].bsums[4 * k + 3];
                sp[(c * nb + i) * 4 + k] = (int32_t)((uint16_t)s0 | (uint32_t)(uint16_t)s1 << 16);
            }
    }
}

/* RN tokens against one packed group; sp: per token and super-block, the 4
 * int16 pairs (S 2k, S 2k+1), S j = bsum 2j + bsum 2j+1. ORD (dot.h) picks the
 * float steps: HX_Q4K_SCALAR gives the whole result (scalar kernel's order);
 * HX_Q4K_PAIR / HX_Q4K_BLOCK give the scale chain acc only (one fma per
 * 64 elements / per super-block) and the driver subtracts the mins chain
 * (q4_K_mins). */
AI void q4_K_packed_tile(const int RN, const int ORD, int64_t nb, const q4_K_pack *p, const uint8_t *x,
                         size_t ldx, const int32_t *sp, float *acc_out) {
    __m256 acc[4];
    UNROLL for (int c = 0; c < RN; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const int8_t *xq[4];
        __m256i isc[4];
        UNROLL for (int c = 0; c < RN; c++) {
            xq[c] = ((const block_q8_K *)(x + c * ldx) + i)->qs;
            isc[c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 8; j++) {
            __m256i s16[4];
            UNROLL for (int c = 0; c < RN; c++) s16[c] = _mm256_setzero_si256();
            UNROLL for (int k = 0; k < 8; k++) {
                const __m256i wq = p[i].q[j][k];
                UNROLL for (int c = 0; c < RN; c++) {
                    int32_t b;
                    memcpy(&b, xq[c] + 32 * j + 4 * k, 4);
                    s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(wq, _mm256_set1_epi32(b)));
                }
            }
            UNROLL for (int c = 0; c < RN; c++) isc[c] = _mm256_add_epi32(isc[c], _mm256_madd_epi16(s16[c], p[i].sc[j]));
            if (ORD == HX_Q4K_PAIR && (j & 1)) /* one step per pair of sub-blocks, then a fresh sum */
                UNROLL for (int c = 0; c < RN; c++) {
                    const float bd = ((const block_q8_K *)(x + c * ldx) + i)->d;
                    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isc[c]), _mm256_mul_ps(p[i].d, _mm256_set1_ps(bd)),
                                             acc[c]);
                    isc[c] = _mm256_setzero_si256();
                }
        }
        UNROLL for (int c = 0; c < RN; c++) {
            const float bd = ((const block_q8_K *)(x + c * ldx) + i)->d;
            if (ORD == HX_Q4K_BLOCK) {
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isc[c]), _mm256_mul_ps(p[i].d, _mm256_set1_ps(bd)), acc[c]);
            } else if (ORD == HX_Q4K_SCALAR) {
                const int32_t *s = sp + ((size_t)c * nb + i) * 4;
                __m256i im = _mm256_madd_epi16(p[i].mn[0], _mm256_set1_epi32(s[0]));
                UNROLL for (int k = 1; k < 4; k++)
                    im = _mm256_add_epi32(im, _mm256_madd_epi16(p[i].mn[k], _mm256_set1_epi32(s[k])));
                const __m256 t = _mm256_sub_ps(_mm256_mul_ps(p[i].d, _mm256_cvtepi32_ps(isc[c])),
                                               _mm256_mul_ps(p[i].dmin, _mm256_cvtepi32_ps(im)));
                acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_set1_ps(bd), t));
            }
        }
    }
    UNROLL for (int c = 0; c < RN; c++) _mm256_storeu_ps(acc_out + 8 * c, acc[c]);
}

/* The mins chain of the ggml orders for one token: accm = fma(im, dmin * bd, accm)
 * per pair of sub-blocks (PAIR) or per super-block (BLOCK), im exact. */
static __m256 q4_K_mins(int ord, int64_t nb, const q4_K_pack *p, const uint8_t *x, const int32_t *sp) {
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m256 dm = _mm256_mul_ps(p[i].dmin, _mm256_set1_ps(((const block_q8_K *)x + i)->d));
        __m256i im = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            im = _mm256_add_epi32(im, _mm256_madd_epi16(p[i].mn[k], _mm256_set1_epi32(sp[i * 4 + k])));
            if (ord == HX_Q4K_PAIR) {
                accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(im), dm, accm);
                im = _mm256_setzero_si256();
            }
        }
        if (ord == HX_Q4K_BLOCK) accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(im), dm, accm);
    }
    return accm;
}

typedef void (*q4_K_tile_fn)(int64_t, const q4_K_pack *, const uint8_t *, size_t, const int32_t *, float *);
#define Q4K_PT(O, N)                                                                                              \
    static void q4_K_packed_##O##_##N(int64_t nb, const q4_K_pack *p, const uint8_t *x, size_t ldx,              \
                                      const int32_t *sp, float *o) {                                              \
        q4_K_packed_tile(N, HX_Q4K_##O, nb, p, x, ldx, sp, o);                                                    \
    }
#define Q4K_PTS(O) Q4K_PT(O, 1) Q4K_PT(O, 2) Q4K_PT(O, 3) Q4K_PT(O, 4)                                           \
    static const q4_K_tile_fn q4_K_tiles_##O[4] = { q4_K_packed_##O##_1, q4_K_packed_##O##_2,                     \
                                                    q4_K_packed_##O##_3, q4_K_packed_##O##_4 };
Q4K_PTS(SCALAR) Q4K_PTS(PAIR) Q4K_PTS(BLOCK)

/* The per-row kernel each order reproduces (also the fallback without scratch memory). */
static hx_vec_dot_fn q4_K_ref(int ord) {
    return ord == HX_Q4K_PAIR ? hx_dot_q4_K_ggml_gemm_avx2 : ord == HX_Q4K_BLOCK ? hx_dot_q4_K_ggml_gemv_avx2
                                                                               : hx_dot_q4_K_scalar;
}

static void gemm_q4_K_packed(int ord, int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                             size_t ldx, float *y, size_t ldy) {
    if (ord == HX_Q4K_BLOCK && nc < 4) { /* matvec and parity batches' last n % 4 tokens: no packing */
        for (int64_t c = 0; c < nc; c++)
            q4_K_gemv_rows(n, nr, w, ldw, (const uint8_t *)x + c * ldx, y + c * ldy);
        return;
    }
    const int64_t nb = n / QK_K;
    q4_K_pack *p = aligned_alloc(32, sizeof(q4_K_pack) * (size_t)nb);
    int32_t *sp = malloc(sizeof(int32_t) * 4 * (size_t)(nc * nb));
    if (!p || !sp) {
        free(p); free(sp);
        for (int64_t c = 0; c < nc; c++)
            for (int64_t r = 0; r < nr; r++)
                q4_K_ref(ord)(n, &y[c * ldy + r], (const uint8_t *)w + r * ldw, (const uint8_t *)x + c * ldx);
        return;
    }
    hx_q8_K_pair_sums(sp, x, ldx, nc, nb);
    const q4_K_tile_fn *tiles = ord == HX_Q4K_PAIR ? q4_K_tiles_PAIR : ord == HX_Q4K_BLOCK ? q4_K_tiles_BLOCK
                                                                                         : q4_K_tiles_SCALAR;
    for (int64_t r0 = 0; r0 < nr; r0 += 8) {
        const int rows = (int)(nr - r0 < 8 ? nr - r0 : 8);
        pack_q4_K(p, nb, (const uint8_t *)w + r0 * ldw, ldw, rows);
        for (int64_t c0 = 0; c0 < nc; c0 += 4) {
            const int cn = (int)(nc - c0 < 4 ? nc - c0 : 4);
            float o[32], m[8];
            tiles[cn - 1](nb, p, (const uint8_t *)x + c0 * ldx, ldx, sp + c0 * nb * 4, o);
            for (int c = 0; c < cn; c++) {
                float *yc = y + (c0 + c) * ldy + r0;
                if (ord == HX_Q4K_SCALAR) {
                    memcpy(yc, o + 8 * c, sizeof(float) * rows);
                    continue;
                }
                _mm256_storeu_ps(m, q4_K_mins(ord, nb, p, (const uint8_t *)x + (c0 + c) * ldx, sp + (c0 + c) * nb * 4));
                for (int r = 0; r < rows; r++) yc[r] = o[8 * c + r] - m[r]; /* acc - accm, as the reference */
            }
        }
    }
    free(p); free(sp);
}

/* Same contract as hx_gemm_q4_K_avx2 but bit-identical to hx_dot_q4_K_scalar;
 * without scratch memory it computes the pairs with the scalar kernel. */
void hx_gemm_q4_K_packed_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                              size_t ldx, float *y, size_t ldy) {
    gemm_q4_K_packed(HX_Q4K_SCALAR, n, nr, nc, w, ldw, x, ldx, y, ldy);
}
/* The same packed groups in llama.cpp's repacked 8x8 orders: bit-identical to
 * hx_dot_q4_K_ggml_gemm_avx2 / hx_dot_q4_K_ggml_gemv_avx2. */
void hx_gemm_q4_K_ggml_gemm_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                                 size_t ldx, float *y, size_t ldy) {
    gemm_q4_K_packed(HX_Q4K_PAIR, n, nr, nc, w, ldw, x, ldx, y, ldy);
}
void hx_gemm_q4_K_ggml_gemv_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                                 size_t ldx, float *y, size_t ldy) {
    gemm_q4_K_packed(HX_Q4K_BLOCK, n, nr, nc, w, ldw, x, ldx, y, ldy);
}

/* ------------------------------------------- Q8_0 batch GEMM, packed rows
 *
 * Both operands are signed, so maddubs does not fit; the packed weights are
 * int16 instead: step s (0..15) holds, in lane r, row r's elements 2s, 2s+1
 * as an int16 pair, and the token's pair (sign-extended once per call) is
 * broadcast; madd gives the pair's sum in int32 (|w x| <= 127 * 128, no
 * overflow). 16 steps of madd + add per (8 rows, token, block): 36 ops
 * against 48 for the tiles. Exact block sums and the scalar kernel's float
 * order (s += (float)sumi * (dw * dx)): bit-identical to hx_dot_q8_0_scalar. */
typedef struct {
    __m256i q[16];  /* step s: lane r = row r's elements 2s, 2s+1 (int16) */
    __m256 d;       /* lane r: row r's block scale */
} q8_0_pack;

static void pack_q8_0(q8_0_pack *p, int64_t nb, const uint8_t *w, size_t ldw, int rows) {
    for (int64_t i = 0; i < nb; i++) {
        __m256i lo[8], hi[8];
        float d[8];
        for (int r = 0; r < 8; r++) {
            if (r < rows) {
                const block_q8_0 *a = (const block_q8_0 *)(w + r * ldw) + i;
                const __m256i v = loadu256(a->qs);
                lo[r] = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
                hi[r] = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1));
                d[r] = f16(a->d);
            } else {
                lo[r] = hi[r] = _mm256_setzero_si256();
                d[r] = 0.f;
            }
        }
        transpose8x32(lo, p[i].q);
        transpose8x32(hi, p[i].q + 8);
        p[i].d = _mm256_loadu_ps(d);
    }
}

/* RN tokens against one packed group; xs: int16 activations, dx: scales, [token][block] */
AI void q8_0_packed_tile(const int RN, int64_t nb, const q8_0_pack *p, const int16_t *xs, const float *dx,
                         float *acc_out) {
    __m256 acc[4];
    UNROLL for (int c = 0; c < RN; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i s32[4];
        UNROLL for (int c = 0; c < RN; c++) s32[c] = _mm256_setzero_si256();
        UNROLL for (int s = 0; s < 16; s++) {
            const __m256i wq = p[i].q[s];
            UNROLL for (int c = 0; c < RN; c++) {
                int32_t b;
                memcpy(&b, xs + ((size_t)c * nb + i) * 32 + 2 * s, 4);
                s32[c] = _mm256_add_epi32(s32[c], _mm256_madd_epi16(wq, _mm256_set1_epi32(b)));
            }
        }
        UNROLL for (int c = 0; c < RN; c++) {
            const __m256 d = _mm256_mul_ps(p[i].d, _mm256_set1_ps(dx[(size_t)c * nb + i]));
            acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_cvtepi32_ps(s32[c]), d));
        }
    }
    UNROLL for (int c = 0; c < RN; c++) _mm256_storeu_ps(acc_out + 8 * c, acc[c]);
}

#define Q80_PT(N)                                                                                                 \
    static void q8_0_packed_##N(int64_t nb, const q8_0_pack *p, const int16_t *xs, const float *dx, float *o) {   \
        q8_0_packed_tile(N, nb, p, xs, dx, o);                                                                    \
    }
Q80_PT(1) Q80_PT(2) Q80_PT(3) Q80_PT(4)

/* Same contract as hx_gemm_q8_0_avx2 but bit-identical to hx_dot_q8_0_scalar;
 * without scratch memory it computes the pairs with the scalar kernel. */
void hx_gemm_q8_0_packed_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                              size_t ldx, float *y, size_t ldy) {
    const int64_t nb = n / QK8_0;
    q8_0_pack *p = aligned_alloc(32, sizeof(q8_0_pack) * (size_t)nb);
    int16_t *xs = aligned_alloc(32, (size_t)(nc * nb * 64 + 32));
    float *dx = malloc(sizeof(float) * (size_t)(nc * nb));
    if (!p || !xs || !dx) {
        free(p); free(xs); free(dx);
        for (int64_t c = 0; c < nc; c++)
            for (int64_t r = 0; r < nr; r++)
                hx_dot_q8_0_scalar(n, &y[c * ldy + r], (const uint8_t *)w + r * ldw, (const uint8_t *)x + c * ldx);
        return;
    }
    for (int64_t c = 0; c < nc; c++) {
        const block_q8_0 *b = (const block_q8_0 *)((const uint8_t *)x + c * ldx);
        for (int64_t i = 0; i < nb; i++) {
            const __m256i v = loadu256(b[i].qs);
            int16_t *o = xs + (c * nb + i) * 32;
            _mm256_store_si256((__m256i *)o, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)));
            _mm256_store_si256((__m256i *)(o + 16), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)));
            dx[c * nb + i] = f16(b[i].d);
        }
    }
    static void (*const tiles[4])(int64_t, const q8_0_pack *, const int16_t *, const float *, float *) = {
        q8_0_packed_1, q8_0_packed_2, q8_0_packed_3, q8_0_packed_4 };
    for (int64_t r0 = 0; r0 < nr; r0 += 8) {
        const int rows = (int)(nr - r0 < 8 ? nr - r0 : 8);
        pack_q8_0(p, nb, (const uint8_t *)w + r0 * ldw, ldw, rows);
        for (int64_t c0 = 0; c0 < nc; c0 += 4) {
            const int cn = (int)(nc - c0 < 4 ? nc - c0 : 4);
            float o[32];
            tiles[cn - 1](nb, p, xs + c0 * nb * 32, dx + c0 * nb, o);
            for (int c = 0; c < cn; c++) memcpy(y + (c0 + c) * ldy + r0, o + 8 * c, sizeof(float) * rows);
        }
    }
    free(p); free(xs); free(dx);
}

/* ------------------------------------------- Q6_K batch GEMM, packed rows
 *
 * Levels q in [0, 63] (unsigned, the first maddubs operand) one row per lane
 * as above; a pair is <= 2 * 63 * 128 = 16128, so the int16 accumulator takes
 * 2 steps; each half sub-block is madd-ed with the row's int8 scale as an
 * int16 pair. The -32 offset is 32 * sum_j sc_j * bsum_j, 8 madds of
 * (sc 2k, sc 2k+1) against the token's bsum pairs. Exact integer total and
 * the scalar kernel's float order, s += (bd * dw) * (float)total:
 * bit-identical to hx_dot_q6_K_scalar. */
typedef struct {
    __m256i q[8][8];  /* 32-element group g, step k: lane r = levels 4k..4k+3 of the group, row r */
    __m256i sc[16];   /* sub-block j: lane r = (sc, sc) as int16 */
    __m256i scp[8];   /* lane r = (sc 2k, sc 2k+1) as int16 */
    __m256 d;
} q6_K_pack;

static void pack_q6_K(q6_K_pack *p, int64_t nb, const uint8_t *w, size_t ldw, int rows) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < nb; i++) {
        __m256i e[8][8]; /* [group][row] */
        int32_t sc[16][8], scp[8][8];
        float d[8];
        for (int r = 0; r < 8; r++) {
            if (r >= rows) {
                for (int g = 0; g < 8; g++) e[g][r] = _mm256_setzero_si256();
                for (int j = 0; j < 16; j++) sc[j][r] = 0;
                for (int k = 0; k < 8; k++) scp[k][r] = 0;
                d[r] = 0.f;
                continue;
            }
            const block_q6_K *a = (const block_q6_K *)(w + r * ldw) + i;
            for (int j = 0; j < 2; j++) {
                const __m256i b1 = loadu256(a->ql + 64 * j), b2 = loadu256(a->ql + 64 * j + 32);
                const __m256i bh = loadu256(a->qh + 32 * j);
                e[4 * j][r] = _mm256_or_si256(_mm256_and_si256(b1, m4), _mm256_slli_epi16(_mm256_and_si256(bh, m2), 4));
                e[4 * j + 1][r] = _mm256_or_si256(_mm256_and_si256(b2, m4),
                                                  _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 2), m2), 4));
                e[4 * j + 2][r] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                                                  _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 4), m2), 4));
                e[4 * j + 3][r] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
                                                  _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 6), m2), 4));
            }
            for (int j = 0; j < 16; j++) sc[j][r] = (int32_t)((uint16_t)a->scales[j] * 0x10001u);
            for (int k = 0; k < 8; k++)
                scp[k][r] = (int32_t)((uint16_t)a->scales[2 * k] | (uint32_t)(uint16_t)a->scales[2 * k + 1] << 16);
            d[r] = f16(a->d);
        }
        for (int g = 0; g < 8; g++) transpose8x32(e[g], p[i].q[g]);
        for (int j = 0; j < 16; j++) p[i].sc[j] = _mm256_loadu_si256((const __m256i *)sc[j]);
        for (int k = 0; k < 8; k++) p[i].scp[k] = _mm256_loadu_si256((const __m256i *)scp[k]);
        p[i].d = _mm256_loadu_ps(d);
    }
}

AI void q6_K_packed_tile(const int RN, int64_t nb, const q6_K_pack *p, const uint8_t *x, size_t ldx,
                         float *acc_out) {
    __m256 acc[4];
    UNROLL for (int c = 0; c < RN; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_q8_K *b[4];
        __m256i isc[4];
        UNROLL for (int c = 0; c < RN; c++) {
            b[c] = (const block_q8_K *)(x + c * ldx) + i;
            isc[c] = _mm256_setzero_si256();
        }
        for (int g = 0; g < 8; g++) {
            UNROLL for (int h = 0; h < 4; h++) { /* 2 steps each; sub-block 2g + h / 2 */
                const __m256i w0 = p[i].q[g][2 * h], w1 = p[i].q[g][2 * h + 1];
                const __m256i scv = p[i].sc[2 * g + h / 2];
                UNROLL for (int c = 0; c < RN; c++) {
                    int32_t b0, b1;
                    memcpy(&b0, b[c]->qs + 32 * g + 8 * h, 4);
                    memcpy(&b1, b[c]->qs + 32 * g + 8 * h + 4, 4);
                    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, _mm256_set1_epi32(b0)),
                                                         _mm256_maddubs_epi16(w1, _mm256_set1_epi32(b1)));
                    isc[c] = _mm256_add_epi32(isc[c], _mm256_madd_epi16(s16, scv));
                }
            }
        }
        UNROLL for (int c = 0; c < RN; c++) {
            __m256i off = _mm256_setzero_si256();
            UNROLL for (int k = 0; k < 8; k++) {
                int32_t bs;
                memcpy(&bs, b[c]->bsums + 2 * k, 4);
                off = _mm256_add_epi32(off, _mm256_madd_epi16(p[i].scp[k], _mm256_set1_epi32(bs)));
            }
            const __m256i total = _mm256_sub_epi32(isc[c], _mm256_slli_epi32(off, 5));
            const __m256 d = _mm256_mul_ps(_mm256_set1_ps(b[c]->d), p[i].d);
            acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(d, _mm256_cvtepi32_ps(total)));
        }
    }
    UNROLL for (int c = 0; c < RN; c++) _mm256_storeu_ps(acc_out + 8 * c, acc[c]);
}

#define Q6K_PT(N)                                                                                                 \
    static void q6_K_packed_##N(int64_t nb, const q6_K_pack *p, const uint8_t *x, size_t ldx, float *o) {         \
        q6_K_packed_tile(N, nb, p, x, ldx, o);                                                                    \
    }
Q6K_PT(1) Q6K_PT(2) Q6K_PT(3) Q6K_PT(4)

/* Same contract as hx_gemm_q6_K_avx2 but bit-identical to hx_dot_q6_K_scalar;
 * without scratch memory it computes the pairs with the scalar kernel. */
void hx_gemm_q6_K_packed_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                              size_t ldx, float *y, size_t ldy) {
    const int64_t nb = n / QK_K;
    q6_K_pack *p = aligned_alloc(32, sizeof(q6_K_pack) * (size_t)nb);
    if (!p) {
        for (int64_t c = 0; c < nc; c++)
            for (int64_t r = 0; r < nr; r++)
                hx_dot_q6_K_scalar(n, &y[c * ldy + r], (const uint8_t *)w + r * ldw, (const uint8_t *)x + c * ldx);
        return;
    }
    static void (*const tiles[4])(int64_t, const q6_K_pack *, const uint8_t *, size_t, float *) = {
        q6_K_packed_1, q6_K_packed_2, q6_K_packed_3, q6_K_packed_4 };
    for (int64_t r0 = 0; r0 < nr; r0 += 8) {
        const int rows = (int)(nr - r0 < 8 ? nr - r0 : 8);
        pack_q6_K(p, nb, (const uint8_t *)w + r0 * ldw, ldw, rows);
        for (int64_t c0 = 0; c0 < nc; c0 += 4) {
            const int cn = (int)(nc - c0 < 4 ? nc - c0 : 4);
            float o[32];
            tiles[cn - 1](nb, p, (const uint8_t *)x + c0 * ldx, ldx, o);
            for (int c = 0; c < cn; c++) memcpy(y + (c0 + c) * ldy + r0, o + 8 * c, sizeof(float) * rows);
        }
    }
    free(p);
}
