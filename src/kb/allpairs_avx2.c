/* allpairs_avx2.c — AVX2+FMA tile kernel: 4 rows x 16 columns in registers. */
#include "kb/allpairs.h"
#include "quant/dot.h"

#include <immintrin.h>
#include <math.h>

void kb_tile_avx2(const float *A, int na, const float *Bt, int dim, float *S) {
    int i = 0;
    for (; i + 4 <= na; i += 4) {
        const float *a0 = A + (size_t)i * dim, *a1 = a0 + dim, *a2 = a1 + dim, *a3 = a2 + dim;
        for (int j = 0; j < KB_TILE; j += 16) {
            __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
            for (int k = 0; k < dim; k++) {
                __m256 b0 = _mm256_loadu_ps(Bt + (size_t)k * KB_TILE + j), b1 = _mm256_loadu_ps(Bt + (size_t)k * KB_TILE + j + 8);
                __m256 x = _mm256_broadcast_ss(a0 + k);
                c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);
                x = _mm256_broadcast_ss(a1 + k);
                c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);
                x = _mm256_broadcast_ss(a2 + k);
                c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);
                x = _mm256_broadcast_ss(a3 + k);
                c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);
            }
            float *s = S + (size_t)i * KB_TILE + j;
            _mm256_storeu_ps(s, c00); _mm256_storeu_ps(s + 8, c01);
            _mm256_storeu_ps(s + KB_TILE, c10); _mm256_storeu_ps(s + KB_TILE + 8, c11);
            _mm256_storeu_ps(s + 2 * KB_TILE, c20); _mm256_storeu_ps(s + 2 * KB_TILE + 8, c21);
            _mm256_storeu_ps(s + 3 * KB_TILE, c30); _mm256_storeu_ps(s + 3 * KB_TILE + 8, c31);
        }
    }
    /* the last 1-3 rows with the same FMA chain per element (not the scalar
     * kernel's separate multiply and add): a pair's similarity is then the
     * same bits wherever its rows fall in a tile, which incremental passes
     * (new rows against old) rely on to match a full pass exactly */
    for (; i < na; i++) {
        const float *a0 = A + (size_t)i * dim;
        for (int j = 0; j < KB_TILE; j += 16) {
            __m256 c0 = _mm256_setzero_ps(), c1 = c0;
            for (int k = 0; k < dim; k++) {
                __m256 x = _mm256_broadcast_ss(a0 + k);
                c0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(Bt + (size_t)k * KB_TILE + j), c0);
                c1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(Bt + (size_t)k * KB_TILE + j + 8), c1);
            }
            _mm256_storeu_ps(S + (size_t)i * KB_TILE + j, c0);
            _mm256_storeu_ps(S + (size_t)i * KB_TILE + j + 8, c1);
        }
    }
}

/* Eight chains at a time (independent FMAs in flight); each chain is the
 * AVX2 tile's lane arithmetic: fmaf over k in order from +0. */
void kb_dots_fma(const float *const *a, const float *const *b, int n, int dim, float *out) {
    int q = 0;
    for (; q + 8 <= n; q += 8) {
        const float *const *x = a + q, *const *y = b + q;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
        for (int k = 0; k < dim; k++) {
            s0 = fmaf(x[0][k], y[0][k], s0); s1 = fmaf(x[1][k], y[1][k], s1);
            s2 = fmaf(x[2][k], y[2][k], s2); s3 = fmaf(x[3][k], y[3][k], s3);
            s4 = fmaf(x[4][k], y[4][k], s4); s5 = fmaf(x[5][k], y[5][k], s5);
            s6 = fmaf(x[6][k], y[6][k], s6); s7 = fmaf(x[7][k], y[7][k], s7);
        }
        out[q] = s0; out[q + 1] = s1; out[q + 2] = s2; out[q + 3] = s3;
        out[q + 4] = s4; out[q + 5] = s5; out[q + 6] = s6; out[q + 7] = s7;
    }
    for (; q < n; q++) {
        float s = 0;
        for (int k = 0; k < dim; k++) s = fmaf(a[q][k], b[q][k], s);
        out[q] = s;
    }
}

void kb_dots_any_avx2(const float *const *a, const float *const *b, int n, int dim, float *out) {
    /* the F32 weights' dot kernel: 4 chains of 8 lanes, any order is all this asks */
    for (int q = 0; q < n; q++) hx_dot_f32_avx2(dim, &out[q], a[q], b[q]);
}
