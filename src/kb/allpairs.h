/* allpairs.h — the similarity tile kernel of the insight engine:
 * S[i][j] = dot(A[i], B[j]) for a tile of up to 64 x 64 unit vectors, with B
 * given transposed (dim x 64, column j = vector j) so the inner loop is an
 * element-wise FMA over 8-wide columns (no horizontal sums). */
#ifndef HX_KB_ALLPAIRS_H
#define HX_KB_ALLPAIRS_H

#include <stddef.h>

#define KB_TILE 64

/* A: na rows of dim (row stride dim); Bt: dim rows of KB_TILE; S: na rows of KB_TILE. */
void kb_tile_scalar(const float *A, int na, const float *Bt, int dim, float *S);
void kb_tile_avx2(const float *A, int na, const float *Bt, int dim, float *S);

#endif
