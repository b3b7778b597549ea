/* sgemm_avx2.c — the AVX2+FMA micro-kernel of sgemm.c (6x16 tile of C in 12
 * ymm registers: per k two loads of the packed panel, six broadcasts of A,
 * twelve FMAs) and the vectorized row helpers (exp, erf-GELU, softmax,
 * LayerNorm). Only called after a run-time AVX2+FMA check. */
#include "backend/cpu/sgemm_impl.h"
#include "quant/simd_avx2.h"

#include <immintrin.h>
#include <math.h>

static inline __attribute__((always_inline)) void tile(const int MR, int64_t K, const float *A, int64_t lda,
                                                        const float *B, float *C, int64_t ldc, int acc) {
    __m256 c0[HX_SGEMM_MR], c1[HX_SGEMM_MR];
    const float *a[HX_SGEMM_MR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        c0[i] = _mm256_setzero_ps();
        c1[i] = _mm256_setzero_ps();
        a[i] = A + (int64_t)i * lda;
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < K; k++) {
        __m256 b0 = _mm256_loadu_ps(B + k * 16), b1 = _mm256_loadu_ps(B + k * 16 + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            __m256 x = _mm256_broadcast_ss(a[i] + k);
            c0[i] = _mm256_fmadd_ps(x, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(x, b1, c1[i]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        float *c = C + (int64_t)i * ldc;
        if (acc) {
            c0[i] = _mm256_add_ps(c0[i], _mm256_loadu_ps(c));
            c1[i] = _mm256_add_ps(c1[i], _mm256_loadu_ps(c + 8));
        }
        _mm256_storeu_ps(c, c0[i]);
        _mm256_storeu_ps(c + 8, c1[i]);
    }
}

#define TILE_FN(M) \
    static void tile##M(int64_t K, const float *A, int64_t lda, const float *B, float *C, int64_t ldc, int acc) { \
        tile(M, K, A, lda, B, C, ldc, acc); \
    }
TILE_FN(1) TILE_FN(2) TILE_FN(3) TILE_FN(4) TILE_FN(5) TILE_FN(6)

void hx_sgemm_tile_avx2(int mr, int64_t K, const float *A, int64_t lda, const float *B, float *C, int64_t ldc, int acc) {
    switch (mr) {
    case 1: tile1(K, A, lda, B, C, ldc, acc); break;
    case 2: tile2(K, A, lda, B, C, ldc, acc); break;
    case 3: tile3(K, A, lda, B, C, ldc, acc); break;
    case 4: tile4(K, A, lda, B, C, ldc, acc); break;
    case 5: tile5(K, A, lda, B, C, ldc, acc); break;
    default: tile6(K, A, lda, B, C, ldc, acc); break;
    }
}

/* 8 rows r[0..7] (8 floats each, from k) -> out[(k + i) * 16 + j] = r[j][k + i], an 8x8 transpose. */
static inline void tr8x8(const float *const r[8], int64_t k, float *out) {
    __m256 a0 = _mm256_loadu_ps(r[0] + k), a1 = _mm256_loadu_ps(r[1] + k), a2 = _mm256_loadu_ps(r[2] + k),
           a3 = _mm256_loadu_ps(r[3] + k), a4 = _mm256_loadu_ps(r[4] + k), a5 = _mm256_loadu_ps(r[5] + k),
           a6 = _mm256_loadu_ps(r[6] + k), a7 = _mm256_loadu_ps(r[7] + k);
    __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1), t2 = _mm256_unpacklo_ps(a2, a3),
           t3 = _mm256_unpackhi_ps(a2, a3), t4 = _mm256_unpacklo_ps(a4, a5), t5 = _mm256_unpackhi_ps(a4, a5),
           t6 = _mm256_unpacklo_ps(a6, a7), t7 = _mm256_unpackhi_ps(a6, a7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE), u2 = _mm256_shuffle_ps(t1, t3, 0x44),
           u3 = _mm256_shuffle_ps(t1, t3, 0xEE), u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(out + 0 * 16, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(out + 1 * 16, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(out + 2 * 16, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(out + 3 * 16, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(out + 4 * 16, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(out + 5 * 16, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(out + 6 * 16, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(out + 7 * 16, _mm256_permute2f128_ps(u3, u7, 0x31));
}

void hx_sgemm_pack_nt_avx2(const float *W, int64_t ldw, int64_t rows, int64_t cols, float *dst) {
    static const float zeros[8] = {0};
    const int64_t k8 = cols & ~(int64_t)7;
    for (int64_t p = 0; p < (rows + 15) / 16; p++) {
        float *d = dst + (size_t)p * 16 * (size_t)cols;
        const float *r[16];
        for (int j = 0; j < 16; j++) r[j] = p * 16 + j < rows ? W + (size_t)(p * 16 + j) * (size_t)ldw : NULL;
        if (k8) {
            const float *z[16]; /* rows past the end read zeros (k stays 0 for them) */
            int64_t step[16];
            for (int j = 0; j < 16; j++) { z[j] = r[j] ? r[j] : zeros; step[j] = r[j] ? 8 : 0; }
            for (int64_t k = 0; k < k8; k += 8) {
                tr8x8(z, 0, d + k * 16);
                tr8x8(z + 8, 0, d + k * 16 + 8);
                for (int j = 0; j < 16; j++) z[j] += step[j];
            }
        }
        for (int64_t k = k8; k < cols; k++)
            for (int j = 0; j < 16; j++) d[k * 16 + j] = r[j] ? r[j][k] : 0.0f;
    }
}

/* e^x, Cephes' expf polynomial after x = n ln2 + r, |r| <= ln2/2; ~1-2 ulp.
 * x is clamped to [-87.3, 88.7] (so e^-inf comes out ~1e-38, not 0). */
static inline __m256 exp256(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* gelu(x) = x/2 (1 + erf(x/sqrt 2)); erf by Abramowitz & Stegun 7.1.26
 * (absolute error <= 1.5e-7). */
static inline __m256 gelu256(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));
    __m256 az = _mm256_andnot_ps(sign, z);
    __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(az, _mm256_set1_ps(0.3275911f), _mm256_set1_ps(1.0f)));
    __m256 p = _mm256_set1_ps(1.061405429f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    p = _mm256_mul_ps(p, t);
    __m256 erf_abs = _mm256_fnmadd_ps(p, exp256(_mm256_mul_ps(_mm256_xor_ps(az, sign), az)), _mm256_set1_ps(1.0f));
    __m256 erf = _mm256_or_ps(erf_abs, _mm256_and_ps(sign, z));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), erf));
}

static inline float gelu1(float x) {
    float buf[8] = {x};
    _mm256_storeu_ps(buf, gelu256(_mm256_loadu_ps(buf)));
    return buf[0];
}

void hx_gelu_avx2(float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gelu256(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) x[i] = gelu1(x[i]);
}

void hx_sgemm_epi_avx2(float *C, int64_t ldc, int mr, int nr, const float *bias, int gelu) {
    for (int i = 0; i < mr; i++) {
        float *c = C + (int64_t)i * ldc;
        int j = 0;
        for (; j + 8 <= nr; j += 8) {
            __m256 v = _mm256_loadu_ps(c + j);
            if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + j));
            if (gelu) v = gelu256(v);
            _mm256_storeu_ps(c + j, v);
        }
        for (; j < nr; j++) {
            float v = c[j] + (bias ? bias[j] : 0.0f);
            c[j] = gelu ? gelu1(v) : v;
        }
    }
}

void hx_softmax_avx2(float *x, int n, float scale) {
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        _mm256_storeu_ps(x + i, v);
        vm = _mm256_max_ps(vm, v);
    }
    float mx = hmax_ps(vm);
    for (; i < n; i++) {
        x[i] *= scale;
        if (x[i] > mx) mx = x[i];
    }
    const __m256 m = _mm256_set1_ps(mx);
    __m256 acc = _mm256_setzero_ps();
    float sum = 0;
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        _mm256_storeu_ps(x + i, v);
        acc = _mm256_add_ps(acc, v);
    }
    if (i < n) { /* the tail through one padded vector */
        float buf[8];
        int r = n - i;
        for (int k = 0; k < 8; k++) buf[k] = k < r ? x[i + k] - mx : -INFINITY;
        _mm256_storeu_ps(buf, exp256(_mm256_loadu_ps(buf)));
        for (int k = 0; k < r; k++) { x[i + k] = buf[k]; sum += buf[k]; }
    }
    sum += hsum_ps(acc);
    const __m256 inv = _mm256_set1_ps(1.0f / sum);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++) x[i] *= 1.0f / sum;
}

void hx_layernorm_avx2(float *x, int n, const float *w, const float *b, float eps) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + i));
    float sum = hsum_ps(acc);
    for (; i < n; i++) sum += x[i];
    const float mean = sum / n;
    const __m256 vm = _mm256_set1_ps(mean);
    acc = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
        acc = _mm256_fmadd_ps(d, d, acc);
    }
    float var = hsum_ps(acc);
    for (; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    const float inv = 1.0f / sqrtf(var / n + eps);
    const __m256 vi = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vi);
        _mm256_storeu_ps(x + i, _mm256_fmadd_ps(d, _mm256_loadu_ps(w + i), _mm256_loadu_ps(b + i)));
    }
    for (; i < n; i++) x[i] = (x[i] - mean) * inv * w[i] + b[i];
}
