/* dot.h — the per-ISA dot kernels (private to src/quant; cpu.c picks one).
 *
 * Every kernel: out = dot(w[0..n), x[0..n)), w in its stored type, x in the
 * type's dot type (Q8_0 / Q8_1 / Q8_K blocks, or f32 for F32/F16/BF16).
 * n is a multiple of the block size; pointers need no alignment.
 */
#ifndef HX_QUANT_DOT_H
#define HX_QUANT_DOT_H

#include "quant/quant.h"

#define HX_DOT_KERNELS(X) \
    X(f32) X(f16) X(bf16) X(q4_0) X(q4_1) X(q5_0) X(q5_1) X(q8_0) \
    X(q2_K) X(q3_K) X(q4_K) X(q5_K) X(q6_K)

#define HX_DECL_SCALAR(t) void hx_dot_##t##_scalar(int64_t n, float *out, const void *w, const void *x);
#define HX_DECL_AVX2(t) void hx_dot_##t##_avx2(int64_t n, float *out, const void *w, const void *x);
HX_DOT_KERNELS(HX_DECL_SCALAR)
HX_DOT_KERNELS(HX_DECL_AVX2)

/* AVX512-VNNI (gemm_avx512.c): the legacy-quant tiles with vpdpbusd, bit-identical to
 * the AVX2 ones (so a higher level never changes a result); per-row dots are the 1x1
 * tiles. Every other (type, level) uses the AVX2 kernel. */
#define HX_DECL_GEMM_VNNI(t) void hx_gemm_##t##_avx512vnni(int64_t n, int64_t nr, int64_t nc, const void *w, \
                                                          size_t ldw, const void *x, size_t ldx, float *y, size_t ldy);
#define HX_DECL_VNNI(t) \
    void hx_dot_##t##_avx512vnni(int64_t n, float *out, const void *w, const void *x); \
    void hx_gemm_##t##_avx512vnni(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x, \
                                  size_t ldx, float *y, size_t ldy);
HX_DECL_VNNI(q8_0) HX_DECL_VNNI(q5_0) HX_DECL_VNNI(q4_0)
/* batch GEMMs on packed 8-row groups with vpdpbusd, bit-identical to hx_dot_{q4_0,q5_0,q8_0}_scalar */
HX_DECL_GEMM_VNNI(q4_0_packed) HX_DECL_GEMM_VNNI(q5_0_packed) HX_DECL_GEMM_VNNI(q8_0_packed)

/* tiled GEMM kernels (gemm_avx2.c); which = 0..3 for Q8_0, Q4_0, Q4_K, Q6_K */
#define HX_DECL_GEMM(t) void hx_gemm_##t##_avx2(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, \
                                                const void *x, size_t ldx, float *y, size_t ldy);
HX_DECL_GEMM(q8_0) HX_DECL_GEMM(q4_0) HX_DECL_GEMM(q4_K) HX_DECL_GEMM(q6_K)
HX_DECL_GEMM(q5_0) /* only through hx_get_gemm_ggml */
void hx_gemm_avx2_set_tile(int which, int mr, int nr, int mv);
/* batch GEMMs on packed 8-row groups, bit-identical to hx_dot_{q8_0,q4_0,q5_0,q4_K,q6_K}_scalar */
HX_DECL_GEMM(q8_0_packed) HX_DECL_GEMM(q4_0_packed) HX_DECL_GEMM(q5_0_packed) HX_DECL_GEMM(q4_K_packed)
HX_DECL_GEMM(q6_K_packed)

/* Q4_K batch kernels in three float orders (the integer sums are exact, so the
 * order of the float steps alone decides the bits):
 *   HX_Q4K_SCALAR  per super-block s += bd * (dw * isc - dmin * imin): hx_dot_q4_K_scalar
 *   HX_Q4K_PAIR    per 64 elements acc = fma(is, dw * bd, acc), accm = fma(im, dmin * bd, accm),
 *                  result acc - accm: hx_dot_q4_K_ggml_gemm_avx2 (llama.cpp's repacked gemm)
 *   HX_Q4K_BLOCK   the same once per super-block: hx_dot_q4_K_ggml_gemv_avx2 (its gemv) */
enum { HX_Q4K_SCALAR, HX_Q4K_PAIR, HX_Q4K_BLOCK };
HX_DECL_GEMM(q4_K_ggml_gemm) HX_DECL_GEMM(q4_K_ggml_gemv) /* 8-row groups, HX_Q4K_PAIR / HX_Q4K_BLOCK */
/* VNNI (gemm_kq_avx512.c): 16-row groups, the same three orders, the same bits */
HX_DECL_GEMM_VNNI(q4_K_packed) HX_DECL_GEMM_VNNI(q4_K_ggml_gemm) HX_DECL_GEMM_VNNI(q4_K_ggml_gemv)
/* Q6_K batches on 16-row groups with vpmaddubsw + vpdpwssd, bit-identical to hx_dot_q6_K_avx2
 * (the parity mode's Q6_K order, hx_get_gemm_ggml) */
HX_DECL_GEMM_VNNI(q6_K_ggml)
/* Q8_0 batches in 4-row x 4-token tiles, activations as u8 (x + 128) with a per-row correction
 * (gemm_q8_avx512.c), bit-identical to hx_dot_q8_0_avx2 (the parity mode's Q8_0 order) */
HX_DECL_GEMM_VNNI(q8_0_ggml)
/* sp[(c * nb + i) * 4 + k] = (S 2k, S 2k+1) as int16s, S j = bsum 2j + bsum 2j+1 of token c's
 * super-block i: what one madd against (m 2k, m 2k+1) pairs needs for the Q4_K mins */
void hx_q8_K_pair_sums(int32_t *sp, const void *x, size_t ldx, int64_t nc, int64_t nb);

/* activation quantizers (act_avx2.c); nb = number of blocks */
void hx_quant_act_q8_0_avx2(const float *x, void *y, int64_t nb);
void hx_quant_act_q8_1_avx2(const float *x, void *y, int64_t nb);
void hx_quant_act_q8_K_avx2(const float *x, void *y, int64_t nb);
/* Q8_0 by the reference rule of hx_quantize_row (roundf, d = amax/127), bit-identical */
void hx_quant_q8_0_ref_avx2(const float *x, void *y, int64_t nb);

#endif
