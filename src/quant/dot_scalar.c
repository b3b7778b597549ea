/* dot_scalar.c — plain C dot kernels: the obviously-correct reference for the
 * SIMD kernels, and the fallback on CPUs without AVX2.
 *
 * Integer parts are summed exactly in int32 per block; the block's scales are
 * applied once per block in float, in the same way the SIMD kernels do. */
#include "quant/dot.h"
#include "quant/quant_formats.h"

void hx_dot_f32_scalar(int64_t n, float *out, const void *w, const void *x) {
    const float *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    *out = (float)s;
}

void hx_dot_f16_scalar(int64_t n, float *out, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)hx_fp16_to_fp32(a[i]) * b[i];
    *out = (float)s;
}

void hx_dot_bf16_scalar(int64_t n, float *out, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)hx_bf16_to_fp32(a[i]) * b[i];
    *out = (float)s;
}

void hx_dot_q4_0_scalar(int64_t n, float *out, const void *w, const void *x) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j];
            sumi += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        }
        s += (float)sumi * (hx_h2f(a[i].d) * hx_h2f(b[i].d));
    }
    *out = s;
}

/* Q4_1: sum (d q + m) * (dx qx) = d dx sum(q qx) + m * (dx sum qx) = ... + m * s */
void hx_dot_q4_1_scalar(int64_t n, float *out, const void *w, const void *x) {
    const block_q4_1 *a = w;
    const block_q8_1 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (a[i].qs[j] & 0xF) * b[i].qs[j];
            sumi += (a[i].qs[j] >> 4) * b[i].qs[j + 16];
        }
        s += (float)sumi * (hx_h2f(a[i].d) * hx_h2f(b[i].d)) + hx_h2f(a[i].m) * hx_h2f(b[i].s);
    }
    *out = s;
}

void hx_dot_q5_0_scalar(int64_t n, float *out, const void *w, const void *x) {
    const block_q5_0 *a = w;
    const block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, a[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (a[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int q1 = (a[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            sumi += (q0 - 16) * b[i].qs[j] + (q1 - 16) * b[i].qs[j + 16];
        }
        s += (float)sumi * (hx_h2f(a[i].d) * hx_h2f(b[i].d));
    }
    *out = s;
}

void hx_dot_q5_1_scalar(int64_t n, float *out, const void *w, const void *x) {
    const block_q5_1 *a = w;
    const block_q8_1 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, a[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (a[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int q1 = (a[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            sumi += q0 * b[i].qs[j] + q1 * b[i].qs[j + 16];
        }
        s += (float)sumi * (hx_h2f(a[i].d) * hx_h2f(b[i].d)) + hx_h2f(a[i].m) * hx_h2f(b[i].s);
    }
    *out = s;
}

void hx_dot_q8_0_scalar(int64_t n, float *out, const void *w, const void *x) {
    const block_q8_0 *a = w;
    const block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += a[i].qs[j] * b[i].qs[j];
        s += (float)sumi * (hx_h2f(a[i].d) * hx_h2f(b[i].d));
    }
    *out = s;
}

/* Q2_K: sum over sub-blocks j of d*sc_j * sum(q qx) - dmin*m_j * bsum_j, times x.d */
void hx_dot_q2_K_scalar(int64_t n, float *out, const void *w, const void *x) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum_sc = 0, sum_m = 0;
        for (int j = 0; j < 16; j++) {
            int sumi = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * j + l, h = e / 128, sh = (e % 128) / 32, ll = e % 32;
                sumi += ((a[i].qs[32 * h + ll] >> (2 * sh)) & 3) * b[i].qs[e];
            }
            sum_sc += (a[i].scales[j] & 0xF) * sumi;
            sum_m += (a[i].scales[j] >> 4) * b[i].bsums[j];
        }
        s += b[i].d * (hx_h2f(a[i].d) * (float)sum_sc - hx_h2f(a[i].dmin) * (float)sum_m);
    }
    *out = s;
}

void hx_dot_q3_K_scalar(int64_t n, float *out, const void *w, const void *x) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        hx_q3k_scales(a[i].scales, sc);
        int total = 0;
        for (int j = 0; j < 16; j++) {
            int sumi = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * j + l, h = e / 128, sh = (e % 128) / 32, ll = e % 32;
                int q = (a[i].qs[32 * h + ll] >> (2 * sh)) & 3;
                q -= (a[i].hmask[ll] >> (e / 32)) & 1 ? 0 : 4;
                sumi += q * b[i].qs[e];
            }
            total += sc[j] * sumi;
        }
        s += b[i].d * hx_h2f(a[i].d) * (float)total;
    }
    *out = s;
}

void hx_dot_q4_K_scalar(int64_t n, float *out, const void *w, const void *x) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum_sc = 0, sum_m = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            hx_k4_scale_min(j, a[i].scales, &sc, &m);
            const uint8_t *q = a[i].qs + 32 * (j / 2);
            int sumi = 0;
            for (int l = 0; l < 32; l++) {
                int v = (j & 1) ? (q[l] >> 4) : (q[l] & 0xF);
                sumi += v * b[i].qs[32 * j + l];
            }
            sum_sc += sc * sumi;
            sum_m += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        s += b[i].d * (hx_h2f(a[i].d) * (float)sum_sc - hx_h2f(a[i].dmin) * (float)sum_m);
    }
    *out = s;
}

void hx_dot_q5_K_scalar(int64_t n, float *out, const void *w, const void *x) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum_sc = 0, sum_m = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            hx_k4_scale_min(j, a[i].scales, &sc, &m);
            const uint8_t *q = a[i].qs + 32 * (j / 2);
            int sumi = 0;
            for (int l = 0; l < 32; l++) {
                int v = (j & 1) ? (q[l] >> 4) : (q[l] & 0xF);
                v |= ((a[i].qh[l] >> j) & 1) << 4;
                sumi += v * b[i].qs[32 * j + l];
            }
            sum_sc += sc * sumi;
            sum_m += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        s += b[i].d * (hx_h2f(a[i].d) * (float)sum_sc - hx_h2f(a[i].dmin) * (float)sum_m);
    }
    *out = s;
}

void hx_dot_q6_K_scalar(int64_t n, float *out, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int total = 0;
        for (int j = 0; j < 16; j++) {
            int sumi = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * j + l, h = e / 128, sh = (e % 128) / 32, ll = e % 32;
                uint8_t lo = a[i].ql[64 * h + ll + 32 * (sh & 1)];
                int q = ((sh >> 1) ? (lo >> 4) : (lo & 0xF)) | (((a[i].qh[32 * h + ll] >> (2 * sh)) & 3) << 4);
                sumi += (q - 32) * b[i].qs[e];
            }
            total += a[i].scales[j] * sumi;
        }
        s += b[i].d * hx_h2f(a[i].d) * (float)total;
    }
    *out = s;
}
