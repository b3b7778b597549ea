/* sgemm_impl.h — private to sgemm.c and its ISA kernels. */
#ifndef HX_CPU_SGEMM_IMPL_H
#define HX_CPU_SGEMM_IMPL_H

#include <stdint.h>

#define HX_SGEMM_MR 6

/* C[mr x 16] (+= when acc) A[mr rows, stride lda][0..K) · B[K][16] (a packed panel slice).
 * mr in 1..HX_SGEMM_MR; all 16 columns of C are written. */
void hx_sgemm_tile_avx2(int mr, int64_t K, const float *A, int64_t lda, const float *B, float *C, int64_t ldc, int acc);
/* C[mr x nr] += bias[0..nr) (bias may be NULL), then GELU when gelu. */
void hx_sgemm_epi_avx2(float *C, int64_t ldc, int mr, int nr, const float *bias, int gelu);
/* hx_sgemm_pack_nt by 8x8 register transposes (the same layout, bit for bit). */
void hx_sgemm_pack_nt_avx2(const float *W, int64_t ldw, int64_t rows, int64_t cols, float *dst);
void hx_gelu_avx2(float *x, int64_t n);
void hx_softmax_avx2(float *x, int n, float scale);
void hx_layernorm_avx2(float *x, int n, const float *w, const float *b, float eps);

#endif
