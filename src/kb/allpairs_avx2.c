/* allpairs_avx2.c — AVX2+FMA tile kernel: 4 rows x 16 columns in registers. */
#include "kb/allpairs.h"

#include <immintrin.h>

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
