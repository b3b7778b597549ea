/* gemm_avx512.c — the legacy-quant tiles of gemm_tiles.h (Q8_0, Q5_0, Q4_0
 * weights x Q8_0 activations) with AVX512-VNNI: vpdpbusd on 256-bit vectors
 * sums four u8 x s8 products straight into an int32 lane, one instruction
 * where AVX2 needs maddubs + madd (and Q4_0's -8 offset becomes the
 * accumulator's start value: one vpdpbusd per row, token and block instead of
 * maddubs, sub, madd).
 *
 * The int32 lanes are the AVX2 kernels' lanes exactly (gemm_tiles.h says why)
 * and every float step is the same, so these kernels give the AVX2 kernels'
 * bits: matvec, batch tiles and the per-row dots (1x1 tiles) alike. The
 * AVX-512 level therefore never changes a result, only the instruction count;
 * the parity mode (HX_MM_GGML_ORDER) may use them as well. 256-bit vectors
 * rather than 512: a zmm would hold two blocks whose float steps then run in
 * another order, and on Zen 4 512-bit ops are split in two 256-bit halves
 * anyway, so they would gain nothing there.
 *
 * Compiled with the AVX-512 flags; called only after cpu.c has checked
 * AVX512F/BW/VL/VNNI in CPUID and the ZMM state in XCR0. With HX_SIMDE_EMU
 * (tests/CMakeLists.txt, where SIMDe's headers exist) the same source is
 * compiled for plain AVX2 with vpdpbusd emulated by SIMDe and every exported
 * name suffixed _emu, so machines without AVX-512 test these kernels too. */
#ifdef HX_SIMDE_EMU
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define HX_EMU(name) name##_emu
#else
#define HX_EMU(name) name
#endif

#include "quant/dot.h"
#include "quant/simd_avx2.h"

#include <stdlib.h>

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")
#define UNROLL8 _Pragma("GCC unroll 8")
enum { LQ_TN = 8 }; /* tokens per packed tile */

#define DOT_U8S8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
/* -sum 8*x per int32 lane: the accumulator Q4_DOT starts from */
#define Q4_OFFSET(xv) _mm256_sub_epi32(_mm256_setzero_si256(), DOT_U8S8(_mm256_set1_epi8(8), xv))
#define Q4_DOT(wq, xv, off) _mm256_dpbusd_epi32(off, wq, xv)
#include "quant/gemm_tiles.h"

TILES(q8_0)
TILES(q5_0)
TILES(q4_0)

/* tile shapes: the AVX2 build's (gemm_avx2.c), batches MR x NR, matvec MV rows */
typedef struct { const tile_fn (*t)[4]; int bs, mr, nr, mv; } gemm_kind;
static const gemm_kind k_q8_0 = { tiles_q8_0, QK8_0, 4, 4, 4 }, k_q5_0 = { tiles_q5_0, QK4_0, 4, 4, 4 },
                       k_q4_0 = { tiles_q4_0, QK4_0, 4, 4, 4 };

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

#define GEMM(T)                                                                                                   \
    void HX_EMU(hx_gemm_##T##_avx512vnni)(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw,           \
                                         const void *x, size_t ldx, float *y, size_t ldy) {                       \
        drive(&k_##T, n, nr, nc, w, ldw, x, ldx, y, ldy);                                                         \
    }                                                                                                             \
    void HX_EMU(hx_dot_##T##_avx512vnni)(int64_t n, float *out, const void *w, const void *x) {                   \
        T##_1x1(n / k_##T.bs, w, 0, x, 0, out, 0);                                                                \
    }
GEMM(q8_0)
GEMM(q5_0)
GEMM(q4_0)

/* ------------------------------------------- Q4_0 / Q5_0 / Q8_0 batch GEMM, packed rows
 *
 * The AVX2 packed kernels' layout (gemm_avx2.c): a group of 8 weight rows
 * repacked per call so that 32-bit lane r of step vector j holds row r's
 * levels 4j..4j+3, and the token's 4 activation bytes of that step broadcast
 * to all lanes. vpdpbusd wants the unsigned operand first, which here is the
 * weights: levels q as stored (Q4_0 0..15, Q5_0 0..31, no offset), the
 * activations as they are (s8). The offset is per token and block:
 * sum (q - o) x = sum q x - o sum x, so the int32 accumulator starts at
 * -o * sum x. Q8_0's weights are signed, so there the roles swap: the
 * activations go in unsigned as x + 128 and the accumulator starts at
 * -128 * sum w per row and block (the pack's corr). One vpdpbusd per
 * (8 rows, token, step), 8 per block, where AVX2 needs broadcast, maddubs and
 * an int16 add per step plus the widening (Q8_0: 16 madd + add).
 * The block sum is exact and the float part is the scalar kernel's
 * (s += (float)sumi * (dw * dx), mul then add), so every output is
 * bit-identical to hx_dot_q{4,5,8}_0_scalar, as the AVX2 packed kernels are. */
enum { LQ_Q4_0, LQ_Q5_0, LQ_Q8_0 };
typedef struct {
    __m256i q[8];   /* step j: lane r = levels 4j..4j+3 of row r (Q4_0/Q5_0 u8, Q8_0 s8) */
    __m256i corr;   /* lane r: Q8_0: -128 * sum of row r's levels; else 0 */
    __m256 d;       /* lane r: row r's block scale */
} lq_pack;

static void pack_lq(lq_pack *p, int64_t nb, const uint8_t *w, size_t ldw, int rows, int kind) {
    for (int64_t i = 0; i < nb; i++) {
        __m256i v[8];
        float d[8];
        int32_t corr[8] = {0};
        for (int r = 0; r < 8; r++) {
            if (r < rows) {
                if (kind == LQ_Q8_0) {
                    const block_q8_0 *a = (const block_q8_0 *)(w + r * ldw) + i;
                    v[r] = loadu256(a->qs);
                    d[r] = f16(a->d);
                    for (int k = 0; k < 32; k++) corr[r] -= 128 * a->qs[k];
                } else if (kind == LQ_Q5_0) {
                    const block_q5_0 *a = (const block_q5_0 *)(w + r * ldw) + i;
                    const __m256i hb = _mm256_and_si256(bytes_from_bits(a->qh), _mm256_set1_epi8(16));
                    v[r] = _mm256_or_si256(unpack_nibbles(a->qs), hb);
                    d[r] = f16(a->d);
                } else {
                    const block_q4_0 *a = (const block_q4_0 *)(w + r * ldw) + i;
                    v[r] = unpack_nibbles(a->qs);
                    d[r] = f16(a->d);
                }
            } else {
                v[r] = _mm256_setzero_si256();
                d[r] = 0.f;
            }
        }
        transpose8x32(v, p[i].q);
        p[i].corr = _mm256_loadu_si256((const __m256i *)corr);
        p[i].d = _mm256_loadu_ps(d);
    }
}

/* RN tokens against one packed group. xs: the tokens' activations (s8; Q8_0:
 * x + 128 as u8), off: -o * (sum of the block's activations) (Q8_0: 0), dx:
 * scales; all [token][block]. XU8: the activations are the unsigned operand. */
AI void lq_packed_tile(const int RN, const bool XU8, int64_t nb, const lq_pack *p, const int8_t *xs,
                       const int32_t *off, const float *dx, float *acc_out) {
    __m256 acc[LQ_TN];
    UNROLL8 for (int c = 0; c < RN; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i s32[LQ_TN];
        UNROLL8 for (int c = 0; c < RN; c++)
            s32[c] = XU8 ? p[i].corr : _mm256_set1_epi32(off[(size_t)c * nb + i]);
        UNROLL8 for (int j = 0; j < 8; j++) {
            const __m256i wq = p[i].q[j];
            UNROLL8 for (int c = 0; c < RN; c++) {
                int32_t b;
                memcpy(&b, xs + ((size_t)c * nb + i) * 32 + 4 * j, 4);
                s32[c] = XU8 ? _mm256_dpbusd_epi32(s32[c], _mm256_set1_epi32(b), wq)
                             : _mm256_dpbusd_epi32(s32[c], wq, _mm256_set1_epi32(b));
            }
        }
        UNROLL8 for (int c = 0; c < RN; c++) {
            const __m256 d = _mm256_mul_ps(p[i].d, _mm256_set1_ps(dx[(size_t)c * nb + i]));
            acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_cvtepi32_ps(s32[c]), d));
        }
    }
    UNROLL8 for (int c = 0; c < RN; c++) _mm256_storeu_ps(acc_out + 8 * c, acc[c]);
}

typedef void (*lq_tile_fn)(int64_t, const lq_pack *, const int8_t *, const int32_t *, const float *, float *);
#define LQ_PT(N, U, T)                                                                                            \
    static void T##_packed_##N(int64_t nb, const lq_pack *p, const int8_t *xs, const int32_t *off, const float *dx, \
                               float *o) {                                                                        \
        lq_packed_tile(N, U, nb, p, xs, off, dx, o);                                                              \
    }
LQ_PT(1, false, lq) LQ_PT(2, false, lq) LQ_PT(3, false, lq) LQ_PT(4, false, lq)
LQ_PT(5, false, lq) LQ_PT(6, false, lq) LQ_PT(7, false, lq) LQ_PT(8, false, lq)
LQ_PT(1, true, q8) LQ_PT(2, true, q8) LQ_PT(3, true, q8) LQ_PT(4, true, q8)
LQ_PT(5, true, q8) LQ_PT(6, true, q8) LQ_PT(7, true, q8) LQ_PT(8, true, q8)

/* Same contract as hx_gemm_q4_0_packed_avx2 (bit-identical to the scalar
 * kernel); if its scratch cannot be allocated the pairs go through the scalar
 * kernel (same bits, slower). */
static void gemm_packed_lq(int kind, int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                           size_t ldx, float *y, size_t ldy) {
    static const lq_tile_fn tiles_lq[LQ_TN] = { lq_packed_1, lq_packed_2, lq_packed_3, lq_packed_4,
                                                lq_packed_5, lq_packed_6, lq_packed_7, lq_packed_8 };
    static const lq_tile_fn tiles_q8[LQ_TN] = { q8_packed_1, q8_packed_2, q8_packed_3, q8_packed_4,
                                                q8_packed_5, q8_packed_6, q8_packed_7, q8_packed_8 };
    const lq_tile_fn *tiles = kind == LQ_Q8_0 ? tiles_q8 : tiles_lq;
    const int64_t nb = n / QK8_0;
    const int32_t o = kind == LQ_Q5_0 ? 16 : kind == LQ_Q4_0 ? 8 : 0;
    const hx_vec_dot_fn scalar = kind == LQ_Q8_0   ? hx_dot_q8_0_scalar
                                 : kind == LQ_Q5_0 ? hx_dot_q5_0_scalar
                                                   : hx_dot_q4_0_scalar;
    lq_pack *p = aligned_alloc(32, sizeof(lq_pack) * (size_t)nb);
    int8_t *xs = malloc((size_t)(nc * nb * 32));
    int32_t *off = malloc(sizeof(int32_t) * (size_t)(nc * nb));
    float *dx = malloc(sizeof(float) * (size_t)(nc * nb));
    if (!p || !xs || !off || !dx) {
        free(p); free(xs); free(off); free(dx);
        for (int64_t c = 0; c < nc; c++)
            for (int64_t r = 0; r < nr; r++)
                scalar(n, &y[c * ldy + r], (const uint8_t *)w + r * ldw, (const uint8_t *)x + c * ldx);
        return;
    }
    for (int64_t c = 0; c < nc; c++) {
        const block_q8_0 *b = (const block_q8_0 *)((const uint8_t *)x + c * ldx);
        for (int64_t i = 0; i < nb; i++) {
            int32_t s = 0;
            for (int k = 0; k < 32; k++) {
                xs[(c * nb + i) * 32 + k] = kind == LQ_Q8_0 ? (int8_t)(b[i].qs[k] ^ 0x80) : b[i].qs[k];
                s += b[i].qs[k];
            }
            off[c * nb + i] = -o * s;
            dx[c * nb + i] = f16(b[i].d);
        }
    }
    for (int64_t r0 = 0; r0 < nr; r0 += 8) {
        const int rows = (int)(nr - r0 < 8 ? nr - r0 : 8);
        pack_lq(p, nb, (const uint8_t *)w + r0 * ldw, ldw, rows, kind);
        for (int64_t c0 = 0; c0 < nc; c0 += LQ_TN) {
            const int cn = (int)(nc - c0 < LQ_TN ? nc - c0 : LQ_TN);
            float out[8 * LQ_TN];
            tiles[cn - 1](nb, p, xs + c0 * nb * 32, off + c0 * nb, dx + c0 * nb, out);
            for (int c = 0; c < cn; c++) memcpy(y + (c0 + c) * ldy + r0, out + 8 * c, sizeof(float) * rows);
        }
    }
    free(p); free(xs); free(off); free(dx);
}

void HX_EMU(hx_gemm_q4_0_packed_avx512vnni)(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw,
                                           const void *x, size_t ldx, float *y, size_t ldy) {
    gemm_packed_lq(LQ_Q4_0, n, nr, nc, w, ldw, x, ldx, y, ldy);
}
void HX_EMU(hx_gemm_q5_0_packed_avx512vnni)(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw,
                                           const void *x, size_t ldx, float *y, size_t ldy) {
    gemm_packed_lq(LQ_Q5_0, n, nr, nc, w, ldw, x, ldx, y, ldy);
}
void HX_EMU(hx_gemm_q8_0_packed_avx512vnni)(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw,
                                           const void *x, size_t ldx, float *y, size_t ldy) {
    gemm_packed_lq(LQ_Q8_0, n, nr, nc, w, ldw, x, ldx, y, ldy);
}
