/* allpairs.c — portable tile kernel (outer-product form, vectorizable). */
#include "kb/allpairs.h"

void kb_tile_scalar(const float *A, int na, const float *Bt, int dim, float *S) {
    for (int i = 0; i < na; i++) {
        float *s = S + (size_t)i * KB_TILE;
        for (int j = 0; j < KB_TILE; j++) s[j] = 0;
        for (int k = 0; k < dim; k++) {
            float a = A[(size_t)i * dim + k];
            const float *b = Bt + (size_t)k * KB_TILE;
            for (int j = 0; j < KB_TILE; j++) s[j] += a * b[j];
        }
    }
}
