/* allpairs.c — portable tile kernels (outer-product form, vectorizable), the
 * int8 quantization of rows for the candidate tiles, and their scalar kernel. */
#include "kb/allpairs.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

void kb_dots_scalar(const float *const *a, const float *const *b, int n, int dim, float *out) {
    for (int q = 0; q < n; q++) {
        float s = 0;
        for (int k = 0; k < dim; k++) {
            float p = a[q][k] * b[q][k]; /* rounded apart, as kb_tile_scalar (this file is built without FMA) */
            s += p;
        }
        out[q] = s;
    }
}

void kb_i8_free(kb_i8 *q) {
    free(q->a); free(q->bp); free(q->corr); free(q->s); free(q->nrm); free(q->res); free(q->nres);
    memset(q, 0, sizeof *q);
}

bool kb_i8_alloc(kb_i8 *q, size_t n, int dim) {
    memset(q, 0, sizeof *q);
    const int dq = (dim + 3) / 4;
    const size_t tiles = (n + KB_TILE - 1) / KB_TILE, np = tiles * KB_TILE;
    q->n = n, q->dim = dim, q->dq = dq;
    q->a = malloc(np ? np * (size_t)dq * 4 : 1);
    q->bp = malloc(tiles ? tiles * (size_t)dq * KB_TILE * 4 : 1);
    q->corr = malloc((np ? np : 1) * sizeof *q->corr);
    q->s = malloc((np ? np : 1) * sizeof(float)), q->nrm = malloc((np ? np : 1) * sizeof(float));
    q->res = malloc((np ? np : 1) * sizeof(float)), q->nres = malloc((np ? np : 1) * sizeof(float));
    if (!q->a || !q->bp || !q->corr || !q->s || !q->nrm || !q->res || !q->nres) { kb_i8_free(q); return false; }
    return true;
}

#define KB_I8_SCALES 8

/* x rounded half away from zero into [-127, 127]; NaN gives 0 (clamped
 * first: converting a NaN or huge float to int is undefined) */
static inline int quant(float x) {
    if (!(x >= -127.0f)) x = x != x ? 0.0f : -127.0f;
    if (x > 127.0f) x = 127.0f;
    return (int)(x + (x >= 0 ? 0.5f : -0.5f));
}

/* the squared residual of v quantized with scale s (float: only to choose s);
 * the scale: max |v| / 127, or (Rows often hold a few distinct magnitudes,
 * the lexical embedder's tf levels: a scale that puts one of them on the
 * grid leaves a smaller residual, hence a tighter bound) one of the first
 * KB_I8_SCALES nonzero magnitudes at the finest grid that keeps q within
 * 127, whichever leaves the least residual. */
static float resid(const float *v, int dim, float s) {
    const float inv = 1.0f / s;
    float r = 0;
    for (int k = 0; k < dim; k++) {
        const float e = v[k] - s * (float)quant(v[k] * inv);
        r += e * e;
    }
    return r;
}

void kb_i8_row_scalar(const float *v, int dim, int8_t *qa, float *scale, int32_t *sum, double *nn, double *rr) {
    float m = 0, s;
    for (int k = 0; k < dim; k++) m = fabsf(v[k]) > m ? fabsf(v[k]) : m;
    s = m / 127.0f;
    if (m > 0) {
        float best = resid(v, dim, s);
        for (int k = 0, tried = 0; k < dim && tried < KB_I8_SCALES; k++) {
            const float mg = fabsf(v[k]), steps = floorf(mg / s);
            if (mg == 0) continue;
            tried++;
            if (steps < 1) continue;
            const float c = mg / steps, r = c >= m / 127.0f ? resid(v, dim, c) : INFINITY;
            if (r < best) best = r, s = c;
        }
    }
    const float inv = m > 0 ? 1.0f / s : 0;
    int32_t su = 0;
    double n2 = 0, r2 = 0;
    for (int k = 0; k < dim; k++) {
        const int qi = quant(v[k] * inv);
        qa[k] = (int8_t)qi;
        su += qi;
        double d = (double)s * qi, e = (double)v[k] - d; /* both exact in double: 24 x 8 bits */
        n2 += d * d, r2 += e * e;
    }
    *scale = s, *sum = su, *nn = n2, *rr = r2;
}

void kb_i8_fill(kb_i8 *q, const float *vec, size_t t) {
    const int dim = q->dim, dq = q->dq, lda = 4 * dq;
    void (*row)(const float *, int, int8_t *, float *, int32_t *, double *, double *) =
        hx_isa_current() >= HX_ISA_AVX512 ? kb_i8_row_avx512 : kb_i8_row_scalar;
    uint8_t *bt = q->bp + t * (size_t)dq * KB_TILE * 4;
    for (size_t r = t * KB_TILE; r < (t + 1) * KB_TILE; r++) {
        int8_t *qa = q->a + r * (size_t)lda;
        memset(qa, 0, (size_t)lda);
        float s = 0;
        double nn = 0, rr = 0;
        int32_t sum = 0;
        if (r < q->n) row(vec + r * (size_t)dim, dim, qa, &s, &sum, &nn, &rr);
        /* the column copy: each quad of q as one word, each byte + 128 */
        for (int k = 0; k < dq; k++) {
            uint32_t w;
            memcpy(&w, qa + 4 * k, 4);
            w ^= 0x80808080u;
            memcpy(bt + ((size_t)k * KB_TILE + r % KB_TILE) * 4, &w, 4);
        }
        q->corr[r] = 128 * sum;
        /* rounded up: the norms feed an upper bound */
        q->s[r] = s;
        q->nrm[r] = (float)(sqrt(nn) * (1 + 1e-6));
        q->res[r] = (float)(sqrt(rr) * (1 + 1e-6));
        q->nres[r] = (float)((sqrt(nn) + sqrt(rr)) * (1 + 1e-6));
    }
}

void kb_i8_tile_scalar(const kb_i8 *q, size_t i0, int na, size_t t, const float *lo, int32_t *acc, uint64_t *mask) {
    const int dq = q->dq, lda = 4 * dq;
    const uint8_t *B = q->bp + t * (size_t)dq * KB_TILE * 4;
    const size_t c0 = t * KB_TILE;
    for (int i = 0; i < na; i++) {
        const size_t a = i0 + (size_t)i;
        const int8_t *x = q->a + a * (size_t)lda;
        int32_t *s = acc + (size_t)i * KB_TILE;
        uint64_t m = 0;
        for (int j = 0; j < KB_TILE; j++) s[j] = 0;
        for (int k = 0; k < dq; k++)
            for (int j = 0; j < KB_TILE; j++)
                for (int u = 0; u < 4; u++) s[j] += (int32_t)B[((size_t)k * KB_TILE + j) * 4 + u] * x[4 * k + u];
        for (int j = 0; j < KB_TILE; j++) {
            const size_t b = c0 + (size_t)j;
            double ub = (double)q->s[a] * q->s[b] * (s[j] - q->corr[a]) + (double)q->nrm[a] * q->res[b] +
                        (double)q->res[a] * q->nres[b];
            if (ub >= lo[i]) m |= 1ull << j;
        }
        mask[i] = m;
    }
}
