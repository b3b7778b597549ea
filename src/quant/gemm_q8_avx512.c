/* gemm_q8_avx512.c — Q8_0 batches (prefill) in the parity order with
 * AVX512-VNNI: every output bit-identical to hx_dot_q8_0_avx2, i.e. to
 * llama.cpp's x86 vec_dot_q8_0_q8_0 and its tinyBLAS batches (8 float lanes
 * per output, lane k of block i adds (float)(sum of products 4k..4k+3) times
 * dw_i * dx_i with one FMA, blocks in order, one hsum_ps at the end).
 *
 * The int32 lane of a block must be exactly sum w x over its 4 bytes (the
 * float steps after it then give the same bits however it was computed).
 * vpdpbusd takes one unsigned operand, so the activations go in as
 * u = x + 128 (x ^ 0x80, one xor per token and block) and the accumulator
 * starts at -128 * (sum of the row's 4 weight bytes of that lane), which is
 * per row and block and computed once per call when the row group is packed:
 *   corr + sum (x + 128) w = sum w x      (|terms| <= 255 * 128 * 4 < 2^31).
 * So a (row, token, block) costs vpdpbusd + vcvtdq2ps + one FMA whose
 * dw * dx factor is a broadcast from a per-tile table (no ALU op), where the
 * tiles of gemm_tiles.h (and tinyBLAS) also pay a vpsignb and a shuffle.
 * vpdpbusd and the FMA share two pipes on Zen 4, so that pair is the floor
 * in this order; the scalar order's packed kernels need one float step per
 * block and output instead of 8 lanes' cvt and FMA, and run faster.
 *
 * Shapes: a call is (nr rows) x (nc tokens) x n; rows in groups of RM = 4,
 * packed per call (levels, corrections, scales: 4 x n x 2 bytes + a little,
 * in L1 while all tokens pass), tokens in tiles of RN = 4 read in place: 16
 * ymm accumulators + 4 weight + 4 correction + 4 activation vectors, within
 * AVX-512's 32 vector registers (larger tiles spill and ran slower).
 *
 * Scratch (per call): one row group nb x (4 x 64 B + 16 B), one tile's
 * scale products nb x 64 B and the tokens' scales nc x nb x 4 B. Without
 * memory the tiles of hx_gemm_q8_0_avx512vnni do the work (the same bits).
 * Compiled with the AVX-512 flags; called only where cpu.c found
 * AVX512-VNNI. */
#include "quant/dot.h"
#include "quant/simd_avx2.h"

#include <stdlib.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

enum { RM = 4, RN = 4 };

/* one row group, repacked: block i of row r at [i * RM + r] */
typedef struct {
    __m256i *q;    /* (nb, RM) 32 B: the weight levels (s8) as stored; rows past the group 0 */
    __m256i *corr; /* (nb, RM): lane k = -128 * (w 4k + .. + w 4k+3), the accumulator's start */
    float *dw;     /* (nb, RM): f16 block scales as f32; rows past the group 0 */
} q8g_rows;

static void pack_rows(q8g_rows *p, int64_t nb, const uint8_t *w, size_t ldw, int rows) {
    const __m256i k128 = _mm256_set1_epi8((char)0x80); /* 128 as the u8 operand */
    for (int64_t i = 0; i < nb; i++)
        for (int r = 0; r < RM; r++) {
            const block_q8_0 *a = (const block_q8_0 *)(w + r * ldw) + i;
            const __m256i q = r < rows ? loadu256(a->qs) : _mm256_setzero_si256();
            p->q[i * RM + r] = q;
            p->corr[i * RM + r] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                                   _mm256_dpbusd_epi32(_mm256_setzero_si256(), k128, q));
            p->dw[i * RM + r] = r < rows ? f16(a->d) : 0.f;
        }
}

/* M x N outputs: the rows of p against tokens x (Q8_0 rows, ldx apart, read in place);
 * dxf: the tokens' block scales as f32, (N, nb); dt: scratch of nb * RM * RN floats */
AI void tile(const int M, const int N, int64_t nb, const q8g_rows *p, const uint8_t *x, size_t ldx,
             const float *dxf, float *dt, float *y, size_t ldy) {
    /* dw_r * dx_c per block, the reference's f32 products: dt[(i * RN + c) * RM + r] */
    for (int64_t i = 0; i < nb; i++) {
        const __m128 dwv = _mm_load_ps(p->dw + i * RM);
        UNROLL for (int c = 0; c < N; c++)
            _mm_store_ps(dt + (i * RN + c) * RM, _mm_mul_ps(dwv, _mm_set1_ps(dxf[c * nb + i])));
    }
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256 acc[RM][RN];
    UNROLL for (int r = 0; r < M; r++) UNROLL for (int c = 0; c < N; c++) acc[r][c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i q[RM], cr[RM], xu[RN];
        UNROLL for (int r = 0; r < M; r++) {
            q[r] = _mm256_load_si256(p->q + i * RM + r);
            cr[r] = _mm256_load_si256(p->corr + i * RM + r);
        }
        UNROLL for (int c = 0; c < N; c++) /* x + 128 as u8 */
            xu[c] = _mm256_xor_si256(loadu256(((const block_q8_0 *)(x + c * ldx) + i)->qs), flip);
        UNROLL for (int c = 0; c < N; c++) UNROLL for (int r = 0; r < M; r++) {
            const __m256 s = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(cr[r], xu[c], q[r]));
            acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dt[(i * RN + c) * RM + r]), s, acc[r][c]);
        }
    }
    UNROLL for (int r = 0; r < M; r++) UNROLL for (int c = 0; c < N; c++) y[c * ldy + r] = hsum_ps(acc[r][c]);
}

typedef void (*tile_fn)(int64_t, const q8g_rows *, const uint8_t *, size_t, const float *, float *, float *,
                        size_t);
#define T(M, N)                                                                                                   \
    static void t_##M##x##N(int64_t nb, const q8g_rows *p, const uint8_t *x, size_t ldx, const float *dxf,        \
                            float *dt, float *y, size_t ldy) {                                                    \
        tile(M, N, nb, p, x, ldx, dxf, dt, y, ldy);                                                               \
    }
#define TROW(M) T(M, 1) T(M, 2) T(M, 3) T(M, 4)
TROW(1) TROW(2) TROW(3) TROW(4)
static const tile_fn tiles[RM][RN] = { { t_1x1, t_1x2, t_1x3, t_1x4 }, { t_2x1, t_2x2, t_2x3, t_2x4 },
                                       { t_3x1, t_3x2, t_3x3, t_3x4 }, { t_4x1, t_4x2, t_4x3, t_4x4 } };

/* Same contract as hx_gemm_q8_0_avx2 (y[c * ldy + r] = dot(w row r, x row c))
 * and its bits. */
void hx_gemm_q8_0_ggml_avx512vnni(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                                  size_t ldx, float *y, size_t ldy) {
    const int64_t nb = n / QK8_0;
    /* q, corr (32-byte vectors) first, so they stay aligned; then dw, dt, dxf */
    const size_t vec = (size_t)nb * RM * sizeof(__m256i);
    const size_t bytes = 2 * vec + (size_t)nb * RM * (1 + RN) * sizeof(float) + (size_t)(nc * nb) * sizeof(float);
    uint8_t *mem = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!mem) {
        hx_gemm_q8_0_avx512vnni(n, nr, nc, w, ldw, x, ldx, y, ldy);
        return;
    }
    q8g_rows p = { (__m256i *)mem, (__m256i *)(mem + vec), (float *)(mem + 2 * vec) };
    float *dt = p.dw + nb * RM, *dxf = dt + nb * RM * RN;
    for (int64_t c = 0; c < nc; c++)
        for (int64_t i = 0; i < nb; i++) dxf[c * nb + i] = f16(((const block_q8_0 *)((const uint8_t *)x + c * ldx) + i)->d);
    for (int64_t r0 = 0; r0 < nr; r0 += RM) {
        const int rm = (int)(nr - r0 < RM ? nr - r0 : RM);
        pack_rows(&p, nb, (const uint8_t *)w + r0 * ldw, ldw, rm);
        for (int64_t c0 = 0; c0 < nc; c0 += RN) {
            const int cn = (int)(nc - c0 < RN ? nc - c0 : RN);
            tiles[rm - 1][cn - 1](nb, &p, (const uint8_t *)x + c0 * ldx, ldx, dxf + c0 * nb, dt, y + c0 * ldy + r0,
                                  ldy);
        }
    }
    free(mem);
}
