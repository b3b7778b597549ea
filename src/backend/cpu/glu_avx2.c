/* glu_avx2.c — SwiGLU with ggml's vector expf, 8 lanes (AVX2+FMA); equal to hx_expf_ggml per lane. */
#include <immintrin.h>

#include "backend/cpu/glu.h"
#include "backend/cpu/expf8_avx2.h"


void hx_swiglu_ggml_avx2(int n8, float *g, const float *u) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int i = 0; i < n8; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, expf8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
}
