/* attn.h — private SIMD helpers of the CPU attention (backend/cpu). */
#ifndef HX_CPU_ATTN_H
#define HX_CPU_ATTN_H

#include <stddef.h>
#include <stdint.h>

/* acc = f16(fma(v, s, acc)) and acc = f16(acc * s) over n halves (AVX2+F16C+FMA). */
void hx_f16_mad_avx2(int n, uint16_t *acc, const uint16_t *v, float s);
void hx_f16_scale_avx2(int n, uint16_t *acc, float s);
/* acc += w * v over n halves into f32 (mul then add, as the scalar code). */
void hx_f32_axpy_f16_avx2(int n, float *acc, const uint16_t *v, float w);
/* dst = f16(src) (round to nearest even) and dst = f32(src) over n values: the
 * bits of hx_fp32_to_fp16 / hx_fp16_to_fp32, 8 lanes at a time. */
void hx_f32_to_f16_row_avx2(int n, uint16_t *dst, const float *src);
void hx_f16_to_f32_row_avx2(int n, float *dst, const uint16_t *src);

/* The most query heads per kv head the grouped kernels below are used for. */
#define HX_ATTN_GROUP_MAX 16

/* Rows of one layer's f16 cache as the attention kernels see them: row r (a
 * ring row, or with pages a position) starts at
 *   pages == NULL: base + r * ld
 *   else:          base + (pages[r >> shift] << shift | r & (2^shift - 1)) * ld
 * (elements), i.e. a page table of 2^shift rows per page over a pool. base
 * may point into a row (a head's columns). */
typedef struct hx_kv_rows {
    const uint16_t *base;
    size_t ld;             /* elements from one row to the next */
    const int32_t *pages;  /* NULL: rows are contiguous */
    int shift;
} hx_kv_rows;

static inline const uint16_t *hx_kv_row(const hx_kv_rows *v, int r) {
    if (!v->pages) return v->base + (size_t)r * v->ld;
    size_t row = (size_t)v->pages[r >> v->shift] << v->shift | (size_t)(r & ((1 << v->shift) - 1));
    return v->base + row * v->ld;
}

/* A walk over the rows (r0 + i) mod rows, i = 0, 1, 2, ... in order (every i,
 * none skipped): the page table is read once per run of rows that lie one
 * after another in memory (to the end of a page, or of the ring), so the
 * inner loops cost what they cost without pages. Start from {0}. */
typedef struct hx_kv_walk { const uint16_t *at; int i0, left; } hx_kv_walk;

static inline const uint16_t *hx_kv_next(const hx_kv_rows *v, hx_kv_walk *w, int i, int r0, int rows) {
    if (w->left == 0) {
        int r = r0 + i < rows ? r0 + i : r0 + i - rows, end = rows;
        if (v->pages) {
            int pe = (r | ((1 << v->shift) - 1)) + 1;
            if (pe < end) end = pe;
        }
        w->at = hx_kv_row(v, r);
        w->left = end - r;
        w->i0 = i;
    }
    w->left--;
    return w->at + (size_t)(i - w->i0) * v->ld;
}

/* The exact mode's attention for the G query heads q (G x hd, contiguous) of one
 * kv head over cnt rows of an f16 cache (row i of the visible run is row
 * (r0 + i) mod rows of kc, r0 < rows), hd a multiple of 32:
 *   scores: s[g * lds + i] = hx_dot_f16_avx2(hd, row i, q_g), bit for bit;
 *   values: out[g * hd + d] = sum over i in order of (s[g * lds + i] * inv[g]) * v_i[d],
 *           the bits of hx_f32_axpy_f16_avx2 applied row by row from zero. */
void hx_attn_scores_f16_avx2(int hd, int G, const float *q, const hx_kv_rows *kc, int r0, int rows, int cnt,
                             float *s, size_t lds);
void hx_attn_values_f16_avx2(int hd, int G, const float *s, size_t lds, const float *inv, const hx_kv_rows *vc,
                             int r0, int rows, int cnt, float *out);

#endif
