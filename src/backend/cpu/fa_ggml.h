/* fa_ggml.h — pieces of ggml's tiled CPU flash attention (64 queries or more), rounded
 * as ggml rounds them, for forward.c's parity mode. A tile is 64 cache rows; kt holds its
 * keys transposed in f32 ([hd][64]), v its values in f32 rows of hd. Each function has a
 * scalar and an AVX2+FMA version with the same bits. */
#ifndef HX_CPU_FA_GGML_H
#define HX_CPU_FA_GGML_H

#include <stdbool.h>

/* s[k] = (sum over d, in order, by fma: kt[d][k] * q[d]) * scale, k < 64 */
void hx_fa_scores64(int hd, const float *kt, const float *q, float scale, float *s, bool avx2);
/* kq[k] = exp(kq[k] - M) by ggml's vector expf; returns the sum of the eight 8-lane sums (each
 * summed as ggml's AVX2 horizontal add) accumulated in double */
double hx_fa_exp64(float *kq, float M, bool avx2);
/* vacc[d] = fma(v[k][d], p[k], vacc[d]) for k = 0..63 in order (rows with p[k] == 0 left out:
 * they add v * 0); v rows are hd floats apart */
void hx_fa_vacc64(int hd, const float *v, const float *p, float *vacc, bool avx2);
void hx_fa_scores64_avx2(int hd, const float *kt, const float *q, float scale, float *s);
double hx_fa_exp64_avx2(float *kq, float M);
void hx_fa_vacc64_avx2(int hd, const float *v, const float *p, float *vacc);

#endif
