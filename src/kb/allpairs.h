/* allpairs.h — the similarity tile kernels of the insight engine.
 *
 * f32 tiles: S[i][j] = dot(A[i], B[j]) for a tile of up to 64 x 64 unit
 * vectors, with B given transposed (dim x 64, column j = vector j) so the
 * inner loop is an element-wise FMA over 8-wide columns (no horizontal sums).
 *
 * int8 candidate tiles: the rows quantized to int8 with one scale each
 * (kb_i8); an integer tile of 64 columns gives each pair a rigorous upper
 * bound of its f32 similarity, and only pairs whose bound reaches a row's
 * window are rescored with the f32 kernel's own arithmetic (kb_dots_*), so
 * the visited similarities are the f32 tiles' bits. */
#ifndef HX_KB_ALLPAIRS_H
#define HX_KB_ALLPAIRS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KB_TILE 64

/* A: na rows of dim (row stride dim); Bt: dim rows of KB_TILE; S: na rows of KB_TILE. */
void kb_tile_scalar(const float *A, int na, const float *Bt, int dim, float *S);
void kb_tile_avx2(const float *A, int na, const float *Bt, int dim, float *S);

/* out[q] = dot(a[q], b[q]) for q < n, each one chain over k in order from
 * +0: _fma fused (the AVX2 tile's lanes), _scalar a rounded product then an
 * add (the scalar tile's). */
void kb_dots_fma(const float *const *a, const float *const *b, int n, int dim, float *out);
void kb_dots_scalar(const float *const *a, const float *const *b, int n, int dim, float *out);
/* out[q] = dot(a[q], b[q]) in f32 summed in any order (8 lanes, 4 chains):
 * within dim 2^-24 sum |a_k b_k| of the real dot, as every f32 order is. */
void kb_dots_any_avx2(const float *const *a, const float *const *b, int n, int dim, float *out);

/* Rows quantized for the candidate tiles: row r ~ s[r] * q_r with q_r int8
 * in [-127, 127] (s = max |a_k| / 127). Per row, the exact real similarity of
 * two rows lies within err(a, b) = nrm[a] res[b] + res[a] (nrm[b] + res[b])
 * of s[a] s[b] dot(q_a, q_b) (Cauchy-Schwarz on a = s q_a + r_a: nrm = |s q|,
 * res = |r|, both rounded up). Arrays of per-row values are padded to whole
 * tiles with zeros. */
typedef struct kb_i8 {
    size_t n;            /* rows */
    int dim, dq;         /* dq = ceil(dim / 4): k in quads */
    int8_t *a;           /* (n, 4 dq) q, row-major, zero padded */
    uint8_t *bp;         /* (tiles, dq, KB_TILE, 4) q + 128: tile t holds rows 64 t .. 64 t + 63 */
    int32_t *corr;       /* (n) 128 * sum_k q_k: what the + 128 of bp adds to a row's dot */
    float *s, *nrm, *res, *nres; /* (tiles * 64) scale, |s q|, |r|, nrm + res */
} kb_i8;

/* kb_i8_alloc: room for n rows of dim (kb_i8_free frees; false, nothing
 * held, when out of memory); kb_i8_fill: quantize tile t's rows (64 t ..) of
 * vec (n, dim), tiles independent of each other (one pool task each). Any
 * integer q gives a valid bound (res is measured, not assumed): q is the
 * nearest of v / s, rounded half away from zero. */
bool kb_i8_alloc(kb_i8 *q, size_t n, int dim);
void kb_i8_fill(kb_i8 *q, const float *vec, size_t t);
/* One row: q into qa (dim bytes), its scale, sum of q, |s q|^2 and |v - s q|^2
 * (in double); kb_i8_fill's per-row step, AVX-512 from HX_ISA_AVX512 on. */
void kb_i8_row_scalar(const float *v, int dim, int8_t *qa, float *scale, int32_t *sum, double *nn, double *rr);
void kb_i8_row_avx512(const float *v, int dim, int8_t *qa, float *scale, int32_t *sum, double *nn, double *rr);
void kb_i8_free(kb_i8 *q);

/* Rows i0 .. i0 + na - 1 (na <= 64) against tile t: acc[i][j] = the integer
 * dot of row i0 + i with row 64 t + j plus corr of row i0 + i (what the
 * unsigned-by-signed product leaves); mask[i] bit j set when the pair's upper
 * bound s_a s_b (acc - corr) + err(a, b) reaches lo[i] (lo already lowered by
 * the f32 rounding slack). The bound may be formed in any float rounding: the
 * caller's window holds slack for it. */
typedef void (*kb_i8_tile_fn)(const kb_i8 *q, size_t i0, int na, size_t t, const float *lo, int32_t *acc,
                              uint64_t *mask);
void kb_i8_tile_scalar(const kb_i8 *q, size_t i0, int na, size_t t, const float *lo, int32_t *acc, uint64_t *mask);
void kb_i8_tile_vnni(const kb_i8 *q, size_t i0, int na, size_t t, const float *lo, int32_t *acc, uint64_t *mask);

#endif
