/* quantize.c — f32 to block formats with the reference algorithms of ggml's
 * quantize_row_*_ref (so files we write match what llama.cpp would write):
 * legacy formats by absmax (or min/max) scaling, K-quants by a search over
 * candidate scales that minimizes a weighted error per sub-block, then 6- or
 * 8-bit quantization of the sub-block scales and a final re-quantization of
 * the elements against the scales as stored.
 *
 * Robustness beyond the reference: f16 scales saturate at ±65504 instead of
 * becoming inf, and rounding never reads out of range, so huge inputs give
 * finite (clipped) blocks instead of NaNs.
 */
#include "quant/dot.h"
#include "quant/quant_formats.h"

#include <float.h>
#include <math.h>

#define GROUP_MAX_EPS 1e-15f
#define MAXI(a, b) ((a) > (b) ? (a) : (b))
#define MINI(a, b) ((a) < (b) ? (a) : (b))

/* Round to nearest, ties to even (the FPU's mode), as ggml's nearest_int
 * does for |v| < 2^22; larger magnitudes saturate instead of wrapping. */
static inline int nearest_int(float v) {
    if (!(fabsf(v) <= 4194303.f)) return v > 0 ? 4194303 : (v < 0 ? -4194303 : 0);
    float t = v + 12582912.f; /* 1.5 * 2^23: the integer lands in the low mantissa bits */
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* f16 bits of a scale, saturated to the largest finite half. */
static inline uint16_t f16_scale(float d) {
    if (d > 65504.f) d = 65504.f;
    if (d < -65504.f) d = -65504.f;
    return hx_fp32_to_fp16(d);
}

/* ---------------------------------------------------------------- legacy */

/* Q4_0 / Q5_0: d = (value of largest magnitude) / -2^(bits-1), so that value
 * maps exactly to level 0 and the sign of the range is used fully. */
static void quant_q4_0(const float *x, block_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        float d = max / -8;
        y[i].d = f16_scale(d);
        if (fabsf(d) > 65504.f) d = hx_h2f(y[i].d);
        const float id = d ? 1.0f / d : 0.0f;
        for (int j = 0; j < 16; j++) {
            float a = x[j] * id + 8.5f, b = x[j + 16] * id + 8.5f;
            int q0 = MINI(15, (int)fmaxf(a, 0.f)), q1 = MINI(15, (int)fmaxf(b, 0.f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quant_q5_0(const float *x, block_q5_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        float d = max / -16;
        y[i].d = f16_scale(d);
        if (fabsf(d) > 65504.f) d = hx_h2f(y[i].d);
        const float id = d ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            float a = x[j] * id + 16.5f, b = x[j + 16] * id + 16.5f;
            int q0 = MINI(31, (int)fmaxf(a, 0.f)), q1 = MINI(31, (int)fmaxf(b, 0.f));
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* Q4_1 / Q5_1: levels spread evenly between the block's min and max. */
static void quant_q4_1(const float *x, block_q4_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) { min = fminf(min, x[j]); max = fmaxf(max, x[j]); }
        float d = (max - min) / 15;
        y[i].d = f16_scale(d);
        y[i].m = f16_scale(min);
        if (fabsf(d) > 65504.f) d = hx_h2f(y[i].d);
        const float id = d ? 1.0f / d : 0.0f;
        for (int j = 0; j < 16; j++) {
            float a = (x[j] - min) * id + 0.5f, b = (x[j + 16] - min) * id + 0.5f;
            int q0 = MINI(15, (int)fmaxf(a, 0.f)), q1 = MINI(15, (int)fmaxf(b, 0.f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quant_q5_1(const float *x, block_q5_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) { min = fminf(min, x[j]); max = fmaxf(max, x[j]); }
        float d = (max - min) / 31;
        y[i].d = f16_scale(d);
        y[i].m = f16_scale(min);
        if (fabsf(d) > 65504.f) d = hx_h2f(y[i].d);
        const float id = d ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            float a = (x[j] - min) * id + 0.5f, b = (x[j + 16] - min) * id + 0.5f;
            int q0 = MINI(31, (int)fmaxf(a, 0.f)), q1 = MINI(31, (int)fmaxf(b, 0.f));
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* Q8_0 / Q8_1: symmetric absmax/127, round half away from zero (roundf). */
static void quant_q8_0(const float *x, block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127;
        y[i].d = f16_scale(d);
        if (d > 65504.f) d = hx_h2f(y[i].d);
        const float id = d ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; j++) y[i].qs[j] = (int8_t)fmaxf(-127.f, fminf(127.f, roundf(x[j] * id)));
    }
}

static void quant_q8_1(const float *x, block_q8_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127;
        y[i].d = f16_scale(d);
        if (d > 65504.f) d = hx_h2f(y[i].d);
        const float id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = (int8_t)fmaxf(-127.f, fminf(127.f, roundf(x[j] * id)));
            sum += y[i].qs[j];
        }
        /* s from the unrounded d, as ggml's quantize_row_q8_1(_ref) does: Q4_1/Q5_1 dots add
         * m * s per block, so an s rounded differently moves real-model logits by ~1e-3 rel */
        y[i].s = f16_scale((float)sum * d);
    }
}

/* -------------------------------------------------------- K-quant helpers */

/* Symmetric quantization of n values to [-nmax, nmax-1] (stored +nmax in L)
 * with weights w = x^2: start from the absmax scale, then try 18 nearby
 * scales and keep the one maximizing (sum w*x*l)^2 / sum w*l^2, i.e. the one
 * whose least-squares scale leaves the smallest weighted error. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = MAXI(-nmax, MINI(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = MAXI(-nmax, MINI(nmax - 1, nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + MAXI(-nmax, MINI(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's variant: absmax start, then up to 5 passes of coordinate descent
 * moving single levels while that raises (sum w*x*l)^2 / sum w*l^2. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = MAXI(-nmax, MINI(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = MAXI(-nmax, MINI(nmax - 1, nearest_int(x[i] * sl2 / slx)));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric quantization x ≈ scale*l - min, l in [0, nmax], min >= 0:
 * try nstep+1 candidate inverse scales around nmax/(max-min); for each, fit
 * scale and min by weighted least squares on the rounded levels and keep the
 * candidate with the lowest weighted error (squared or absolute). */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                              bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)MAXI(0, MINI(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = MAXI(0, MINI(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Pack 256 2-bit levels: element 128h + 32s + l -> bits 2s of qs[32h + l]. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* ---------------------------------------------------------------- K-quants */

static void quant_q2_K(const float *x, block_q2_K *y, int64_t nb) {
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[16], scales[16];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = 15.f / max_scale;
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)MINI(15, nearest_int(iscale * scales[j]));
            y[i].d = f16_scale(max_scale / 15.f);
        } else {
            memset(y[i].scales, 0, 16);
            y[i].d = 0;
        }
        if (max_min > 0) {
            float iscale = 15.f / max_min;
            for (int j = 0; j < 16; j++) y[i].scales[j] |= (uint8_t)(MINI(15, nearest_int(iscale * mins[j])) << 4);
            y[i].dmin = f16_scale(max_min / 15.f);
        } else {
            y[i].dmin = 0;
        }
        for (int j = 0; j < 16; j++) {
            const float d = hx_h2f(y[i].d) * (float)(y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = hx_h2f(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (uint8_t)MAXI(0, MINI(3, nearest_int((x[16 * j + ii] + dm) / d)));
        }
        pack_2bit(L, y[i].qs);
    }
}

static void quant_q3_K(const float *x, block_q3_K *y, int64_t nb) {
    int8_t L[QK_K];
    float scales[16];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) { amax = fabsf(scales[j]); max_scale = scales[j]; }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = MAXI(-32, MINI(31, nearest_int(iscale * scales[j]))) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = f16_scale(1 / iscale);
        } else {
            y[i].d = 0;
        }
        int8_t sc[16];
        hx_q3k_scales(y[i].scales, sc);
        for (int j = 0; j < 16; j++) {
            float d = hx_h2f(y[i].d) * (float)sc[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)(MAXI(-4, MINI(3, nearest_int(x[16 * j + ii] / d))) + 4);
        }
        /* third bit of element e -> bit e/32 of hmask[e%32] */
        memset(y[i].hmask, 0, 32);
        uint8_t U[QK_K];
        for (int e = 0; e < QK_K; e++) {
            int l = L[e];
            if (l > 3) { y[i].hmask[e % 32] |= (uint8_t)(1 << (e / 32)); l -= 4; }
            U[e] = (uint8_t)l;
        }
        pack_2bit(U, y[i].qs);
    }
}

/* Shared by Q4_K and Q5_K: per 32-element sub-block scale/min search, then
 * 6-bit quantization of scales and mins against their maxima. */
static void k4_scales(const float *x, int nmax, float rmin, float rdelta, int nstep, uint8_t *L,
                      uint8_t packed[12], uint16_t *d_out, uint16_t *dmin_out) {
    uint8_t Laux[32];
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)MINI(63, nearest_int(inv_scale * scales[j]));
        uint8_t lm = (uint8_t)MINI(63, nearest_int(inv_min * mins[j]));
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = f16_scale(max_scale / 63.f);
    *dmin_out = f16_scale(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        hx_k4_scale_min(j, packed, &sc, &m);
        const float d = hx_h2f(*d_out) * (float)sc;
        if (!d) continue;
        const float dm = hx_h2f(*dmin_out) * (float)m;
        for (int ii = 0; ii < 32; ii++)
            L[32 * j + ii] = (uint8_t)MAXI(0, MINI(nmax, nearest_int((x[32 * j + ii] + dm) / d)));
    }
}

static void quant_q4_K(const float *x, block_q4_K *y, int64_t nb) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        memset(y[i].scales, 0, 12);
        k4_scales(x, 15, -1.f, 0.1f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

static void quant_q5_K(const float *x, block_q5_K *y, int64_t nb) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        memset(y[i].scales, 0, 12);
        k4_scales(x, 31, -0.5f, 0.1f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
        memset(y[i].qh, 0, 32);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                if (l1 > 15) { l1 -= 16; y[i].qh[l] |= (uint8_t)(1 << (2 * c)); }
                if (l2 > 15) { l2 -= 16; y[i].qh[l] |= (uint8_t)(1 << (2 * c + 1)); }
                y[i].qs[32 * c + l] = (uint8_t)(l1 | (l2 << 4));
            }
    }
}

static void quant_q6_K(const float *x, block_q6_K *y, int64_t nb) {
    int8_t L[QK_K];
    float scales[16];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) { max_abs_scale = fabsf(scales[ib]); max_scale = scales[ib]; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = f16_scale(1 / iscale);
        for (int ib = 0; ib < 16; ib++) y[i].scales[ib] = (int8_t)MAXI(-128, MINI(127, nearest_int(iscale * scales[ib])));
        for (int j = 0; j < 16; j++) {
            float d = hx_h2f(y[i].d) * (float)y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)(MAXI(-32, MINI(31, nearest_int(x[16 * j + ii] / d))) + 32);
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
                uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
    }
}

/* Q8_K (activations), as ggml's quantize_row_q8_K_ref: iscale = -127/max where
 * max is the first value of largest magnitude (so levels lie in [-127, 127]);
 * bsums let the K-quant dots apply their per-sub-block mins without touching
 * qs again. */
static void quant_q8_K(const float *x, block_q8_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        if (!(amax > 0) || !isfinite(amax)) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) y[i].qs[j] = (int8_t)MAXI(-127, MINI(127, nearest_int(iscale * x[j])));
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)s;
        }
        y[i].d = 1 / iscale;
    }
}

/* Q8_0 / Q8_1 activations the way llama.cpp's x86 CPU backend makes them:
 * multiply by 127/amax (not by 1/d) and round half to even. */
static void quant_act_q8_0(const float *x, block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        y[i].d = f16_scale(amax / 127.f);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (int j = 0; j < 32; j++) y[i].qs[j] = (int8_t)MAXI(-127, MINI(127, nearest_int(x[j] * id)));
    }
}

static void quant_act_q8_1(const float *x, block_q8_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.f;
        y[i].d = f16_scale(d);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = (int8_t)MAXI(-127, MINI(127, nearest_int(x[j] * id)));
            sum += y[i].qs[j];
        }
        y[i].s = f16_scale(d * (float)sum);
    }
}

size_t hx_quantize_row_act(int type, const float *src, void *dst, int64_t n) {
    const hx_type_info *t = hx_type_get(type);
    if (!t || !t->supported || n <= 0 || n % t->block_size) return 0;
    const int64_t nb = n / t->block_size;
    const bool avx2 = hx_isa_current() >= HX_ISA_AVX2;
    switch (type) {
    case HX_TYPE_Q8_0:
        if (avx2) hx_quant_act_q8_0_avx2(src, dst, nb);
        else quant_act_q8_0(src, dst, nb);
        break;
    case HX_TYPE_Q8_1:
        if (avx2) hx_quant_act_q8_1_avx2(src, dst, nb);
        else quant_act_q8_1(src, dst, nb);
        break;
    case HX_TYPE_Q8_K:
        if (avx2) hx_quant_act_q8_K_avx2(src, dst, nb);
        else quant_q8_K(src, dst, nb);
        break;
    default: return hx_quantize_row(type, src, dst, n);
    }
    return (size_t)nb * (size_t)t->type_size;
}

size_t hx_quantize_row(int type, const float *src, void *dst, int64_t n) {
    const hx_type_info *t = hx_type_get(type);
    if (!t || !t->supported || n <= 0 || n % t->block_size) return 0;
    const int64_t nb = n / t->block_size;
    switch (type) {
    case HX_TYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case HX_TYPE_F16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = hx_fp32_to_fp16(src[i]);
        break;
    }
    case HX_TYPE_BF16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = hx_fp32_to_bf16(src[i]);
        break;
    }
    case HX_TYPE_Q4_0: quant_q4_0(src, dst, nb); break;
    case HX_TYPE_Q4_1: quant_q4_1(src, dst, nb); break;
    case HX_TYPE_Q5_0: quant_q5_0(src, dst, nb); break;
    case HX_TYPE_Q5_1: quant_q5_1(src, dst, nb); break;
    /* Q8_0 and Q8_K (also the matmul activation types): AVX2 versions, bit-identical */
    case HX_TYPE_Q8_0:
        if (hx_isa_current() >= HX_ISA_AVX2) hx_quant_q8_0_ref_avx2(src, dst, nb);
        else quant_q8_0(src, dst, nb);
        break;
    case HX_TYPE_Q8_1: quant_q8_1(src, dst, nb); break;
    case HX_TYPE_Q2_K: quant_q2_K(src, dst, nb); break;
    case HX_TYPE_Q3_K: quant_q3_K(src, dst, nb); break;
    case HX_TYPE_Q4_K: quant_q4_K(src, dst, nb); break;
    case HX_TYPE_Q5_K: quant_q5_K(src, dst, nb); break;
    case HX_TYPE_Q6_K: quant_q6_K(src, dst, nb); break;
    case HX_TYPE_Q8_K:
        if (hx_isa_current() >= HX_ISA_AVX2) hx_quant_act_q8_K_avx2(src, dst, nb);
        else quant_q8_K(src, dst, nb);
        break;
    default: return 0;
    }
    return (size_t)nb * (size_t)t->type_size;
}
