/* gemm_tiles.h — the legacy-quant tile kernels (Q8_0, Q5_0, Q4_0 weights x
 * Q8_0 activations), written once and compiled twice: by gemm_avx2.c with
 * AVX2's maddubs + madd and by gemm_avx512.c with AVX512-VNNI's vpdpbusd (on
 * 256-bit vectors). The includer defines AI, UNROLL and three integer macros:
 *   DOT_U8S8(u, s)      int32 lane k = sum of u8 u[4k..4k+3] x s8 s[4k..4k+3]
 *   Q4_OFFSET(xv)       per token and block: what Q4_DOT needs for the -8 offset
 *   Q4_DOT(wq, xv, off) int32 lane k = sum of (wq - 8) x xv over bytes 4k..4k+3
 * Every int32 lane is an exact integer (maddubs' int16 pair sums cannot
 * saturate here: |u| <= 128, |s| <= 127 for Q8_0, u <= 15 for Q4_0/Q5_0), so
 * both builds give the same lanes and, with the same float steps after them,
 * the same bits. Include only from files compiled with at least -mavx2 -mfma
 * -mf16c, after quant/simd_avx2.h. */
#ifndef HX_QUANT_GEMM_TILES_H
#define HX_QUANT_GEMM_TILES_H

/* Matvec software prefetch. A matvec task streams a contiguous run of rows,
 * RM rows per tile, and the hardware prefetchers do poorly on it: a row is
 * only 9 cache lines at 1024 columns and a tile reads RM such short streams
 * side by side. So RMx1 tiles prefetch PF_TILES tiles ahead: at block i, the
 * RM block-widths of bytes at the same offset i * RM * sizeof(block) from
 * the start of tile + PF_TILES; over the nb blocks this covers that tile's
 * RM * ldw bytes exactly once (consecutive prefetch addresses are at most 64
 * bytes apart, so no line is skipped). Prefetches past the end of the task
 * or matrix are harmless hints (they never fault). Measured (one thread, time
 * on CPU, qwen3-0.6b shapes, 1 / 2 / 4 tiles ahead vs none): 2.0-2.6x the
 * GB/s of no prefetch for Q4_0, Q8_0, Q4_K; 2 tiles was best. Tiles with RN > 1
 * (matmul) are compute-bound and reuse their rows from L1: no prefetch. The
 * per-row kernels (ldw 0) skip it too. */
enum { PF_TILES = 2 };
#define PF_SETUP() const char *pfb = (const char *)w + (size_t)PF_TILES * RM * ldw; const bool pf = RN == 1 && ldw;
#define PF(BS, i)                                                                                                  \
    if (pf) {                                                                                                      \
        const char *p_ = pfb + (size_t)(i) * RM * (BS);                                                            \
        for (int o_ = 0; o_ < RM * (int)(BS); o_ += 64) _mm_prefetch(p_ + o_, _MM_HINT_T0);                        \
    }


typedef void (*tile_fn)(int64_t nb, const uint8_t *w, size_t ldw, const uint8_t *x, size_t ldx, float *y,
                        size_t ldy);

/* The f16 scales of RM rows' blocks (at byte offset boff in each row) times
 * dx, as 8 floats whose 128-bit halves both hold the RM products: gathered in
 * integer registers (idle ports), one vcvtph2ps and one mul for all rows;
 * lane_bcast then spreads row r's product with one in-lane permute. The
 * products are the same floats as f16(dw) * f16(dx) computed row by row. */
AI __m256 scales_x(const int RM, const uint8_t *w, size_t ldw, size_t boff, __m128 dx) {
    uint64_t u = 0;
    UNROLL for (int r = 0; r < RM; r++) {
        uint16_t h;
        memcpy(&h, w + r * ldw + boff, 2);
        u |= (uint64_t)h << (16 * r);
    }
    const __m128 f = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)u)), dx);
    return _mm256_set_m128(f, f);
}
AI __m256 lane_bcast(__m256 v, int r) {
    switch (r) {
    case 0: return _mm256_permute_ps(v, 0x00);
    case 1: return _mm256_permute_ps(v, 0x55);
    case 2: return _mm256_permute_ps(v, 0xAA);
    default: return _mm256_permute_ps(v, 0xFF);
    }
}

/* ------------------------------------------------------------------ Q8_0 */

AI void tile_q8_0(const int RM, const int RN, int64_t nb, const uint8_t *w, size_t ldw, const uint8_t *x,
                  size_t ldx, float *y, size_t ldy) {
    __m256 acc[4][4];
    UNROLL for (int r = 0; r < RM; r++) UNROLL for (int c = 0; c < RN; c++) acc[r][c] = _mm256_setzero_ps();
    PF_SETUP()
    for (int64_t i = 0; i < nb; i++) {
        PF(sizeof(block_q8_0), i)
        __m256i wa[4];
        UNROLL for (int r = 0; r < RM; r++) {
            const block_q8_0 *a = (const block_q8_0 *)(w + r * ldw) + i;
            const __m256i v = loadu256(a->qs);
            wa[r] = _mm256_sign_epi8(v, v);
        }
        UNROLL for (int c = 0; c < RN; c++) {
            const block_q8_0 *b = (const block_q8_0 *)(x + c * ldx) + i;
            const __m256i xv = loadu256(b->qs);
            const __m256 d = scales_x(RM, w, ldw, (size_t)i * sizeof(block_q8_0), _mm_set1_ps(f16(b->d)));
            UNROLL for (int r = 0; r < RM; r++) {
                const block_q8_0 *a = (const block_q8_0 *)(w + r * ldw) + i;
                const __m256 s = _mm256_cvtepi32_ps(DOT_U8S8(wa[r], _mm256_sign_epi8(xv, loadu256(a->qs))));
                acc[r][c] = _mm256_fmadd_ps(lane_bcast(d, r), s, acc[r][c]);
            }
        }
    }
    UNROLL for (int r = 0; r < RM; r++) UNROLL for (int c = 0; c < RN; c++) y[c * ldy + r] = hsum_ps(acc[r][c]);
}

/* ------------------------------------------------------------------ Q5_0 */

/* As tile_q8_0 with the weights unpacked to int8 levels q - 16 first: per output one FMA per
 * block in order and one hsum, i.e. bit-identical to hx_dot_q5_0_avx2 (and to ggml's
 * vec_dot / tinyBLAS order; matmul's HX_MM_GGML_ORDER uses it for Q5_0 batches). */
AI void tile_q5_0(const int RM, const int RN, int64_t nb, const uint8_t *w, size_t ldw, const uint8_t *x,
                  size_t ldx, float *y, size_t ldy) {
    __m256 acc[4][4];
    UNROLL for (int r = 0; r < RM; r++) UNROLL for (int c = 0; c < RN; c++) acc[r][c] = _mm256_setzero_ps();
    PF_SETUP()
    for (int64_t i = 0; i < nb; i++) {
        PF(sizeof(block_q5_0), i)
        __m256i wq[4], wa[4];
        UNROLL for (int r = 0; r < RM; r++) {
            const block_q5_0 *a = (const block_q5_0 *)(w + r * ldw) + i;
            const __m256i hi = _mm256_andnot_si256(bytes_from_bits(a->qh), _mm256_set1_epi8((char)0xF0));
            wq[r] = _mm256_or_si256(unpack_nibbles(a->qs), hi);
            wa[r] = _mm256_sign_epi8(wq[r], wq[r]);
        }
        UNROLL for (int c = 0; c < RN; c++) {
            const block_q8_0 *b = (const block_q8_0 *)(x + c * ldx) + i;
            const __m256i xv = loadu256(b->qs);
            const __m256 d = scales_x(RM, w, ldw, (size_t)i * sizeof(block_q5_0), _mm_set1_ps(f16(b->d)));
            UNROLL for (int r = 0; r < RM; r++) {
                const __m256 s = _mm256_cvtepi32_ps(DOT_U8S8(wa[r], _mm256_sign_epi8(xv, wq[r])));
                acc[r][c] = _mm256_fmadd_ps(lane_bcast(d, r), s, acc[r][c]);
            }
        }
    }
    UNROLL for (int r = 0; r < RM; r++) UNROLL for (int c = 0; c < RN; c++) y[c * ldy + r] = hsum_ps(acc[r][c]);
}

/* ------------------------------------------------------------------ Q4_0 */

/* sum (q-8)*x = sum q*x - sum 8*x, pairwise in int16; the 8*x part is per token */
AI void tile_q4_0(const int RM, const int RN, int64_t nb, const uint8_t *w, size_t ldw, const uint8_t *x,
                  size_t ldx, float *y, size_t ldy) {
    __m256 acc[4][4];
    UNROLL for (int r = 0; r < RM; r++) UNROLL for (int c = 0; c < RN; c++) acc[r][c] = _mm256_setzero_ps();
    PF_SETUP()
    for (int64_t i = 0; i < nb; i++) {
        PF(sizeof(block_q4_0), i)
        __m256i wq[4];
        UNROLL for (int r = 0; r < RM; r++) {
            const block_q4_0 *a = (const block_q4_0 *)(w + r * ldw) + i;
            wq[r] = unpack_nibbles(a->qs);
        }
        UNROLL for (int c = 0; c < RN; c++) {
            const block_q8_0 *b = (const block_q8_0 *)(x + c * ldx) + i;
            const __m256i xv = loadu256(b->qs);
            const __m256i m8 = Q4_OFFSET(xv);
            const __m256 d = scales_x(RM, w, ldw, (size_t)i * sizeof(block_q4_0), _mm_set1_ps(f16(b->d)));
            UNROLL for (int r = 0; r < RM; r++) {
                const __m256 s = _mm256_cvtepi32_ps(Q4_DOT(wq[r], xv, m8));
                acc[r][c] = _mm256_fmadd_ps(lane_bcast(d, r), s, acc[r][c]);
            }
        }
    }
    UNROLL for (int r = 0; r < RM; r++) UNROLL for (int c = 0; c < RN; c++) y[c * ldy + r] = hsum_ps(acc[r][c]);
}


/* ------------------------------------------------------- instantiation */

#define TILE(T, M, N)                                                                                             \
    static void T##_##M##x##N(int64_t nb, const uint8_t *w, size_t ldw, const uint8_t *x, size_t ldx, float *y, \
                              size_t ldy) {                                                                       \
        tile_##T(M, N, nb, w, ldw, x, ldx, y, ldy);                                                               \
    }
#define TILES_ROW(T, M) TILE(T, M, 1) TILE(T, M, 2) TILE(T, M, 3) TILE(T, M, 4)
#define TILES(T) TILES_ROW(T, 1) TILES_ROW(T, 2) TILES_ROW(T, 3) TILES_ROW(T, 4)                                \
    static const tile_fn tiles_##T[4][4] = {                                                                      \
        { T##_1x1, T##_1x2, T##_1x3, T##_1x4 }, { T##_2x1, T##_2x2, T##_2x3, T##_2x4 },                         \
        { T##_3x1, T##_3x2, T##_3x3, T##_3x4 }, { T##_4x1, T##_4x2, T##_4x3, T##_4x4 } };

#endif
