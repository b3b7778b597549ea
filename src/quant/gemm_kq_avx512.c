/* gemm_kq_avx512.c — Q4_K x Q8_K batch GEMM (prefill) with AVX512-VNNI.
 *
 * Layout: per call, 16 weight rows are repacked so that one row sits in one
 * 32-bit lane of a zmm. Per super-block, 32-element sub-block j and step k
 * (0..7), one zmm holds levels 4k..4k+3 of sub-block j of all 16 rows (u8,
 * 0..15). A step is one vpdpbusd per token with the token's 4 activation
 * bytes (s8, as stored in Q8_K) broadcast from memory, so each loaded weight
 * vector serves a tile of RN tokens and each activation dword 16 rows:
 *
 *   for each super-block i, sub-block j, step k:        w = pack.q[j][k]   (16 rows x 4 levels)
 *     for each token c < RN:  s[c] = vpdpbusd(s[c], w, bcast(x_c[32j + 4k .. +3]))
 *   per sub-block: is[c] += s[c] * sc_j (vpmulld, the 6-bit scale per lane)
 *
 * Every int32 lane is an exact integer (|s| <= 32 * 15 * 128, |is| <= 64 * 63
 * * 15 * 128 < 2^23), and so is the mins term m 2j * S 2j + m 2j+1 * S 2j+1
 * (S: the token's 32-element sums from bsums), one vpmaddwd of (m, m) int16
 * pairs against the token's (S, S) pair. So the float steps alone decide the
 * bits, and they are those of the per-row reference of each order (dot.h):
 * HX_Q4K_SCALAR gives hx_dot_q4_K_scalar's bits (hx_gemm_q4_K_packed_avx2's),
 * HX_Q4K_PAIR / HX_Q4K_BLOCK hx_dot_q4_K_ggml_gemm_avx2 / _gemv_avx2's
 * (hx_gemm_q4_K_ggml_gemm_avx2 / _gemv_avx2's): a higher level changes the
 * speed, never a result.
 *
 * Against the AVX2 packed kernel (8 rows, maddubs + int16 add per step):
 * one instruction per step instead of two, 16 rows per instruction instead of
 * 8, and the broadcast folded into the instruction (embedded {1to16}).
 *
 * Compiled with the AVX-512 flags; called only after cpu.c has checked
 * AVX512F/BW/VL/VNNI in CPUID and the ZMM state in XCR0. */
#include "quant/dot.h"
#include "quant/simd_avx2.h"

#include <stdlib.h>

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

enum { GR = 16, TN = 8 }; /* rows per packed group (zmm lanes), tokens per tile */

typedef struct {
    __m512i q[8][8];  /* [sub-block j][step k]: lane r = levels 4k..4k+3 of sub-block j of row r (u8) */
    __m512i sc[8];    /* [sub-block j]: lane r = its 6-bit scale (int32) */
    __m512i mn[4];    /* [pair k]: lane r = (m 2k, m 2k+1) as int16 */
    __m512 d, dmin;   /* lane r = f16 d, dmin of row r as f32 */
} q4_K_pack16;        /* one super-block of 16 rows: 4992 bytes */

static inline __m512i join256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* rows (<= 16) weight rows, ldw bytes apart -> nb packed super-blocks; rows past
 * `rows` are zero (their outputs are computed and dropped). */
static void pack_q4_K16(q4_K_pack16 *p, int64_t nb, const uint8_t *w, size_t ldw, int rows) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int64_t i = 0; i < nb; i++) {
        int32_t sc[8][GR], mn[4][GR];
        float d[GR], dmin[GR];
        __m256i lv[8][GR]; /* [sub-block][row]: the 32 levels */
        for (int r = 0; r < GR; r++) {
            uint8_t sm[16] = {0};
            d[r] = dmin[r] = 0.f;
            if (r < rows) {
                const block_q4_K *a = (const block_q4_K *)(w + r * ldw) + i;
                _mm_storeu_si128((__m128i *)sm, k4_scales_mins(a->scales));
                d[r] = f16(a->d);
                dmin[r] = f16(a->dmin);
                for (int jp = 0; jp < 4; jp++) {
                    const __m256i bits = loadu256(a->qs + 32 * jp);
                    lv[2 * jp][r] = _mm256_and_si256(bits, m4);
                    lv[2 * jp + 1][r] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                }
            } else {
                for (int j = 0; j < 8; j++) lv[j][r] = _mm256_setzero_si256();
            }
            for (int j = 0; j < 8; j++) sc[j][r] = sm[j];
            for (int k = 0; k < 4; k++) mn[k][r] = (int32_t)(sm[8 + 2 * k] | (uint32_t)sm[9 + 2 * k] << 16);
        }
        for (int j = 0; j < 8; j++) {
            __m256i lo[8], hi[8];
            transpose8x32(lv[j], lo);
            transpose8x32(lv[j] + 8, hi);
            for (int k = 0; k < 8; k++) p[i].q[j][k] = join256(lo[k], hi[k]);
        }
        for (int j = 0; j < 8; j++) p[i].sc[j] = _mm512_loadu_si512(sc[j]);
        for (int k = 0; k < 4; k++) p[i].mn[k] = _mm512_loadu_si512(mn[k]);
        p[i].d = _mm512_loadu_ps(d);
        p[i].dmin = _mm512_loadu_ps(dmin);
    }
}

/* RN tokens (rows ldx bytes apart) against one packed group. SCALAR: the
 * whole result; PAIR / BLOCK: the scale chain acc only, the driver subtracts
 * the mins chain (mins16). out: [RN][16]. */
AI void q4_K_tile16(const int RN, const int ORD, int64_t nb, const q4_K_pack16 *p, const uint8_t *x, size_t ldx,
                    const int32_t *sp, float *out) {
    __m512 acc[TN];
    UNROLL for (int c = 0; c < RN; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_q8_K *b[TN];
        UNROLL for (int c = 0; c < RN; c++) b[c] = (const block_q8_K *)(x + c * ldx) + i;
        __m512i is[TN]; /* PAIR: the pair's sum; else the super-block's */
        UNROLL for (int c = 0; c < RN; c++) is[c] = _mm512_setzero_si512();
        for (int jp = 0; jp < 4; jp++) {
            UNROLL for (int h = 0; h < 2; h++) {
                const int j = 2 * jp + h;
                __m512i s[TN];
                UNROLL for (int c = 0; c < RN; c++) s[c] = _mm512_setzero_si512();
                UNROLL for (int k = 0; k < 8; k++) {
                    const __m512i wq = p[i].q[j][k];
                    UNROLL for (int c = 0; c < RN; c++) {
                        int32_t v;
                        memcpy(&v, b[c]->qs + 32 * j + 4 * k, 4);
                        s[c] = _mm512_dpbusd_epi32(s[c], wq, _mm512_set1_epi32(v));
                    }
                }
                UNROLL for (int c = 0; c < RN; c++) is[c] = _mm512_add_epi32(is[c], _mm512_mullo_epi32(s[c], p[i].sc[j]));
            }
            if (ORD == HX_Q4K_PAIR)
                UNROLL for (int c = 0; c < RN; c++) {
                    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[c]), _mm512_mul_ps(p[i].d, _mm512_set1_ps(b[c]->d)),
                                             acc[c]);
                    is[c] = _mm512_setzero_si512();
                }
        }
        UNROLL for (int c = 0; c < RN; c++) {
            if (ORD == HX_Q4K_BLOCK) {
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[c]), _mm512_mul_ps(p[i].d, _mm512_set1_ps(b[c]->d)),
                                         acc[c]);
            } else if (ORD == HX_Q4K_SCALAR) {
                const int32_t *s = sp + ((size_t)c * nb + i) * 4;
                __m512i im = _mm512_madd_epi16(p[i].mn[0], _mm512_set1_epi32(s[0]));
                for (int k = 1; k < 4; k++)
                    im = _mm512_add_epi32(im, _mm512_madd_epi16(p[i].mn[k], _mm512_set1_epi32(s[k])));
                const __m512 t = _mm512_sub_ps(_mm512_mul_ps(p[i].d, _mm512_cvtepi32_ps(is[c])),
                                               _mm512_mul_ps(p[i].dmin, _mm512_cvtepi32_ps(im)));
                acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_set1_ps(b[c]->d), t));
            }
        }
    }
    UNROLL for (int c = 0; c < RN; c++) _mm512_storeu_ps(out + GR * c, acc[c]);
}

/* The mins chain of the ggml orders for one token (x: its Q8_K row, sp: its pair sums):
 * accm = fma(im, dmin * bd, accm) per pair of sub-blocks (PAIR) or super-block (BLOCK). */
static __m512 mins16(int ord, int64_t nb, const q4_K_pack16 *p, const uint8_t *x, const int32_t *sp) {
    __m512 accm = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m512 dm = _mm512_mul_ps(p[i].dmin, _mm512_set1_ps(((const block_q8_K *)x + i)->d));
        __m512i im = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) {
            im = _mm512_add_epi32(im, _mm512_madd_epi16(p[i].mn[k], _mm512_set1_epi32(sp[i * 4 + k])));
            if (ord == HX_Q4K_PAIR) {
                accm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), dm, accm);
                im = _mm512_setzero_si512();
            }
        }
        if (ord == HX_Q4K_BLOCK) accm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), dm, accm);
    }
    return accm;
}

typedef void (*tile16_fn)(int64_t, const q4_K_pack16 *, const uint8_t *, size_t, const int32_t *, float *);
#define T16(O, N)                                                                                                 \
    static void t16_##O##_##N(int64_t nb, const q4_K_pack16 *p, const uint8_t *x, size_t ldx, const int32_t *sp, \
                              float *o) {                                                                         \
        q4_K_tile16(N, HX_Q4K_##O, nb, p, x, ldx, sp, o);                                                         \
    }
#define T16S(O) T16(O, 1) T16(O, 2) T16(O, 3) T16(O, 4) T16(O, 5) T16(O, 6) T16(O, 7) T16(O, 8)                  \
    static const tile16_fn tiles16_##O[TN] = { t16_##O##_1, t16_##O##_2, t16_##O##_3, t16_##O##_4,                \
                                               t16_##O##_5, t16_##O##_6, t16_##O##_7, t16_##O##_8 };
T16S(SCALAR) T16S(PAIR) T16S(BLOCK)

/* y[c * ldy + r] for r < nr, c < nc in order `ord`; without scratch memory the
 * AVX2 packed kernel of the same order (the same bits) does the work. */
static void gemm_q4_K16(int ord, int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                        size_t ldx, float *y, size_t ldy) {
    if (ord == HX_Q4K_BLOCK && nc < 4) { /* matvec, a batch's last n % 4 tokens: the AVX2 row tiles */
        hx_gemm_q4_K_ggml_gemv_avx2(n, nr, nc, w, ldw, x, ldx, y, ldy);
        return;
    }
    const int64_t nb = n / QK_K;
    q4_K_pack16 *p = aligned_alloc(64, sizeof(q4_K_pack16) * (size_t)nb);
    int32_t *sp = malloc(sizeof(int32_t) * 4 * (size_t)(nc * nb));
    if (!p || !sp) {
        free(p); free(sp);
        (ord == HX_Q4K_PAIR ? hx_gemm_q4_K_ggml_gemm_avx2 : ord == HX_Q4K_BLOCK ? hx_gemm_q4_K_ggml_gemv_avx2
                                                                                : hx_gemm_q4_K_packed_avx2)(
            n, nr, nc, w, ldw, x, ldx, y, ldy);
        return;
    }
    hx_q8_K_pair_sums(sp, x, ldx, nc, nb);
    const tile16_fn *tiles = ord == HX_Q4K_PAIR ? tiles16_PAIR : ord == HX_Q4K_BLOCK ? tiles16_BLOCK : tiles16_SCALAR;
    for (int64_t r0 = 0; r0 < nr; r0 += GR) {
        const int rows = (int)(nr - r0 < GR ? nr - r0 : GR);
        pack_q4_K16(p, nb, (const uint8_t *)w + r0 * ldw, ldw, rows);
        for (int64_t c0 = 0; c0 < nc; c0 += TN) {
            const int cn = (int)(nc - c0 < TN ? nc - c0 : TN);
            float o[GR * TN], m[GR];
            tiles[cn - 1](nb, p, (const uint8_t *)x + c0 * ldx, ldx, sp + c0 * nb * 4, o);
            for (int c = 0; c < cn; c++) {
                float *yc = y + (c0 + c) * ldy + r0;
                if (ord == HX_Q4K_SCALAR) {
                    memcpy(yc, o + GR * c, sizeof(float) * rows);
                    continue;
                }
                _mm512_storeu_ps(m, mins16(ord, nb, p, (const uint8_t *)x + (c0 + c) * ldx, sp + (c0 + c) * nb * 4));
                for (int r = 0; r < rows; r++) yc[r] = o[GR * c + r] - m[r]; /* acc - accm, as the reference */
            }
        }
    }
    free(p); free(sp);
}

void hx_gemm_q4_K_packed_avx512vnni(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                                    size_t ldx, float *y, size_t ldy) {
    gemm_q4_K16(HX_Q4K_SCALAR, n, nr, nc, w, ldw, x, ldx, y, ldy);
}
void hx_gemm_q4_K_ggml_gemm_avx512vnni(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                                       size_t ldx, float *y, size_t ldy) {
    gemm_q4_K16(HX_Q4K_PAIR, n, nr, nc, w, ldw, x, ldx, y, ldy);
}
void hx_gemm_q4_K_ggml_gemv_avx512vnni(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                                       size_t ldx, float *y, size_t ldy) {
    gemm_q4_K16(HX_Q4K_BLOCK, n, nr, nc, w, ldw, x, ldx, y, ldy);
}

/* ------------------------------------------------------------------ Q6_K
 *
 * Q6_K batches in the order of the AVX2 per-row kernel (hx_dot_q6_K_avx2, the
 * 1x1 tile; ggml's x86 vec_dot, so the parity mode's): an output is 8 float
 * lanes, lane l the exact integer
 *   si_l = sum over the 8 chunks ch of 32 elements: sc(sub-block 2 ch + l / 4) * (q . x over bytes 4l..4l+3 of ch)
 *          - 32 * (sc 2l * bsum 2l + sc 2l+1 * bsum 2l+1)
 * stepped acc_l = fma(bd * dw, si_l, acc_l) once per super-block and summed at
 * the end as hsum_ps does: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
 * Here a zmm lane is a row again (16 rows), and lane l of the reference
 * becomes its own accumulator: per (chunk, l) one vpmaddubsw of the 16 rows'
 * 4 levels (u8, 0..63) against the token's broadcast 4 bytes (int16 pair
 * sums, |.| <= 2 * 63 * 128, no saturation), then one vpdpwssd with the rows'
 * (sc, sc) int16 pair: sc * 4 products added in int32. The same integers, the
 * same float steps: the AVX2 kernel's bits. */
typedef struct {
    __m512i q[8][8];  /* [chunk ch][lane l]: lane r = levels 4l..4l+3 of chunk ch of row r (u8) */
    __m512i sc[16];   /* [sub-block s]: lane r = (sc, sc) as int16 */
    __m512i scp[8];   /* [l]: lane r = (sc 2l, sc 2l+1) as int16 */
    __m512 d;         /* lane r = f16 d of row r */
} q6_K_pack16;

static void pack_q6_K16(q6_K_pack16 *p, int64_t nb, const uint8_t *w, size_t ldw, int rows) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < nb; i++) {
        __m256i e[8][GR]; /* [chunk][row]: its 32 levels */
        int32_t sc[16][GR], scp[8][GR];
        float d[GR];
        for (int r = 0; r < GR; r++) {
            if (r >= rows) {
                for (int g = 0; g < 8; g++) e[g][r] = _mm256_setzero_si256();
                for (int s = 0; s < 16; s++) sc[s][r] = 0;
                for (int l = 0; l < 8; l++) scp[l][r] = 0;
                d[r] = 0.f;
                continue;
            }
            const block_q6_K *a = (const block_q6_K *)(w + r * ldw) + i;
            for (int j = 0; j < 2; j++) { /* chunk 4j + k: elements 128j + 32k .. +31 */
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
            for (int s = 0; s < 16; s++) sc[s][r] = (int32_t)((uint16_t)a->scales[s] * 0x10001u);
            for (int l = 0; l < 8; l++)
                scp[l][r] = (int32_t)((uint16_t)a->scales[2 * l] | (uint32_t)(uint16_t)a->scales[2 * l + 1] << 16);
            d[r] = f16(a->d);
        }
        for (int g = 0; g < 8; g++) {
            __m256i lo[8], hi[8];
            transpose8x32(e[g], lo);
            transpose8x32(e[g] + 8, hi);
            for (int l = 0; l < 8; l++) p[i].q[g][l] = join256(lo[l], hi[l]);
        }
        for (int s = 0; s < 16; s++) p[i].sc[s] = _mm512_loadu_si512(sc[s]);
        for (int l = 0; l < 8; l++) p[i].scp[l] = _mm512_loadu_si512(scp[l]);
        p[i].d = _mm512_loadu_ps(d);
    }
}

/* RN tokens against one packed group; out: [RN][16], each the hsum of its 8 lane accumulators */
AI void q6_K_tile16(const int RN, int64_t nb, const q6_K_pack16 *p, const uint8_t *x, size_t ldx, float *out) {
    __m512 acc[TN][8]; /* [token][reference lane l] */
    UNROLL for (int c = 0; c < RN; c++) for (int l = 0; l < 8; l++) acc[c][l] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_q8_K *b[TN];
        __m512 dd[TN];
        UNROLL for (int c = 0; c < RN; c++) {
            b[c] = (const block_q8_K *)(x + c * ldx) + i;
            dd[c] = _mm512_mul_ps(_mm512_set1_ps(b[c]->d), p[i].d); /* bd * dw, as the reference */
        }
        for (int l = 0; l < 8; l++) {
            __m512i s[TN];
            UNROLL for (int c = 0; c < RN; c++) s[c] = _mm512_setzero_si512();
            UNROLL for (int ch = 0; ch < 8; ch++) {
                const __m512i wq = p[i].q[ch][l], scv = p[i].sc[2 * ch + l / 4];
                UNROLL for (int c = 0; c < RN; c++) {
                    int32_t v;
                    memcpy(&v, b[c]->qs + 32 * ch + 4 * l, 4);
                    s[c] = _mm512_dpwssd_epi32(s[c], _mm512_maddubs_epi16(wq, _mm512_set1_epi32(v)), scv);
                }
            }
            UNROLL for (int c = 0; c < RN; c++) {
                int32_t bs;
                memcpy(&bs, b[c]->bsums + 2 * l, 4);
                const __m512i off = _mm512_madd_epi16(p[i].scp[l], _mm512_set1_epi32(bs));
                const __m512i si = _mm512_sub_epi32(s[c], _mm512_slli_epi32(off, 5));
                acc[c][l] = _mm512_fmadd_ps(dd[c], _mm512_cvtepi32_ps(si), acc[c][l]);
            }
        }
    }
    UNROLL for (int c = 0; c < RN; c++) {
        const __m512 *a = acc[c];
        const __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                                       _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
        _mm512_storeu_ps(out + GR * c, t);
    }
}

typedef void (*q6_tile16_fn)(int64_t, const q6_K_pack16 *, const uint8_t *, size_t, float *);
#define Q6T(N)                                                                                                    \
    static void q6t_##N(int64_t nb, const q6_K_pack16 *p, const uint8_t *x, size_t ldx, float *o) {               \
        q6_K_tile16(N, nb, p, x, ldx, o);                                                                         \
    }
Q6T(1) Q6T(2) Q6T(3) Q6T(4) Q6T(5) Q6T(6) Q6T(7) Q6T(8)
static const q6_tile16_fn q6_tiles16[TN] = { q6t_1, q6t_2, q6t_3, q6t_4, q6t_5, q6t_6, q6t_7, q6t_8 };

/* Same contract as hx_gemm_q6_K_avx2 and its bits (every output = hx_dot_q6_K_avx2's);
 * without scratch memory hx_gemm_q6_K_avx2 does the work. */
void hx_gemm_q6_K_ggml_avx512vnni(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                                  size_t ldx, float *y, size_t ldy) {
    const int64_t nb = n / QK_K;
    q6_K_pack16 *p = aligned_alloc(64, sizeof(q6_K_pack16) * (size_t)nb);
    if (!p) {
        hx_gemm_q6_K_avx2(n, nr, nc, w, ldw, x, ldx, y, ldy);
        return;
    }
    for (int64_t r0 = 0; r0 < nr; r0 += GR) {
        const int rows = (int)(nr - r0 < GR ? nr - r0 : GR);
        pack_q6_K16(p, nb, (const uint8_t *)w + r0 * ldw, ldw, rows);
        for (int64_t c0 = 0; c0 < nc; c0 += TN) {
            const int cn = (int)(nc - c0 < TN ? nc - c0 : TN);
            float o[GR * TN];
            q6_tiles16[cn - 1](nb, p, (const uint8_t *)x + c0 * ldx, ldx, o);
            for (int c = 0; c < cn; c++) memcpy(y + (c0 + c) * ldy + r0, o + GR * c, sizeof(float) * rows);
        }
    }
    free(p);
}
