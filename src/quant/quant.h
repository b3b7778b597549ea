/* quant.h — GGUF tensor types: block tables, dequantize, quantize, dot kernels.
 *
 * Type numbers are ggml's (stable on disk). Block layouts follow the GGUF
 * definitions exactly (see quant_formats.h for the structs). Dot products take
 * a weight row in its stored type and an activation row already quantized to
 * that type's "dot type" (Q8_0 for Q4_0/Q4_1(*)/Q5_0/Q5_1(*)/Q8_0, Q8_K for the
 * K-quants, F32 for F32/F16/BF16). (*) Q4_1/Q5_1 use Q8_1 like ggml.
 *
 * Typical matvec use (y = W x, W of type t with rows of n elements):
 *   const hx_type_info *ti = hx_type_get(t);
 *   hx_quantize_row_act(ti->dot_type, x, xq, n);          // once per x
 *   hx_vec_dot_fn dot = hx_get_vec_dot(t, hx_isa_current()); // once
 *   for (r = 0; r < rows; r++) dot(n, &y[r], (char *)W + r * hx_row_size(t, n), xq);
 */
#ifndef HX_QUANT_H
#define HX_QUANT_H

#include "helix.h"

typedef enum hx_type {
    HX_TYPE_F32 = 0, HX_TYPE_F16 = 1, HX_TYPE_Q4_0 = 2, HX_TYPE_Q4_1 = 3,
    HX_TYPE_Q5_0 = 6, HX_TYPE_Q5_1 = 7, HX_TYPE_Q8_0 = 8, HX_TYPE_Q8_1 = 9,
    HX_TYPE_Q2_K = 10, HX_TYPE_Q3_K = 11, HX_TYPE_Q4_K = 12, HX_TYPE_Q5_K = 13,
    HX_TYPE_Q6_K = 14, HX_TYPE_Q8_K = 15,
    HX_TYPE_I8 = 24, HX_TYPE_I16 = 25, HX_TYPE_I32 = 26, HX_TYPE_I64 = 27,
    HX_TYPE_F64 = 28, HX_TYPE_BF16 = 30,
    HX_TYPE_COUNT = 40
} hx_type;

typedef struct hx_type_info {
    const char *name;     /* "Q4_K" */
    int block_size;       /* elements per block */
    int type_size;        /* bytes per block */
    bool supported;       /* we can dequantize it */
    int dot_type;         /* activation type for hx_vec_dot */
} hx_type_info;

/* NULL for numbers that are not a known type. */
const hx_type_info *hx_type_get(int type);
const char *hx_type_name(int type);          /* "?" for unknown */
int hx_type_from_name(const char *name);     /* -1 if unknown (case-insensitive) */
/* Bytes for a row of n elements; 0 if n is not a multiple of the block size or the type is unknown. */
size_t hx_row_size(int type, int64_t n);

/* Dequantize n elements (n a multiple of the block size). Bit-exact with ggml. */
void hx_dequantize_row(int type, const void *src, float *dst, int64_t n);
/* Quantize n elements (n a multiple of the block size) of f32 into type (incl.
 * Q8_0/Q8_1/Q8_K activation formats). Returns bytes written, 0 if unsupported. */
size_t hx_quantize_row(int type, const float *src, void *dst, int64_t n);

/* Quantize an activation row for hx_vec_dot: Q8_0 / Q8_1 / Q8_K as llama.cpp's
 * CPU backend does it (Q8_0/Q8_1: q = round-half-even(x * 127/amax), d = f16(amax/127),
 * Q8_1 s = f16(d * sum q); Q8_K: ggml's quantize_row_q8_K_ref), vectorized with
 * AVX2 where usable and bit-identical to the scalar path. Use it for activations
 * (hx_quantize_row is the weight quantizer, byte-exact with llama-quantize).
 * Other types fall through to hx_quantize_row. Returns bytes written, 0 if unsupported. */
size_t hx_quantize_row_act(int type, const float *src, void *dst, int64_t n);

/* ---- CPU dot kernels ---- */
typedef enum hx_isa { HX_ISA_SCALAR = 0, HX_ISA_AVX2 = 1, HX_ISA_AVX512 = 2, HX_ISA_AVX512_VNNI = 3 } hx_isa;
typedef struct hx_cpu_features {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avx_vnni;
    bool amx_tile_advertised, amx_usable;
    bool os_avx, os_avx512; /* XCR0 says the OS saves the state */
    bool avx512dq;          /* the AVX-512 kernels are built with F/BW/VL/DQ */
} hx_cpu_features;
hx_cpu_features hx_cpu_detect(void);
hx_isa hx_isa_best(void);          /* best usable ISA on this CPU+OS */
const char *hx_isa_name(hx_isa isa);
/* Force an ISA (tests, benchmarks). Returns false if not usable here. */
bool hx_isa_set(hx_isa isa);
hx_isa hx_isa_current(void);

/* out = dot(w[0..n), x[0..n)) where w is of `type` and x of hx_type_get(type)->dot_type.
 * n: a multiple of the block size (any n for F32/F16/BF16). Quantized
 * activations must have levels in [-127, 127], as both quantizers produce
 * (the AVX2 kernels use the |w| * (x * sign w) trick). Thread-safe, no state. */
typedef void (*hx_vec_dot_fn)(int64_t n, float *out, const void *w, const void *x);
/* Q4_K x Q8_K in the float order of llama.cpp's repacked (8x8) x86 kernels (q4k_ggml_avx2.c):
 * _gemv as for a single activation row (one FMA step per super-block), _gemm as for rows in
 * groups of 4 (one step per 64 elements). AVX2+FMA only. */
void hx_dot_q4_K_ggml_gemv_avx2(int64_t n, float *out, const void *w, const void *x);
void hx_dot_q4_K_ggml_gemm_avx2(int64_t n, float *out, const void *w, const void *x);
/* The kernel for (type, isa); falls back to a lower ISA where no specialized
 * kernel exists, and never above hx_isa_best(). NULL if the type has no dot
 * kernel. Kernels: scalar and AVX2 for all 13 weight types; AVX-512 (plain and
 * VNNI) for F32, F16, Q4_0, Q8_0, Q4_K, Q6_K. */
hx_vec_dot_fn hx_get_vec_dot(int type, hx_isa isa);
/* Convenience: kernel for the current ISA. */
void hx_vec_dot(int type, int64_t n, float *out, const void *w, const void *x);

/* Tiled quantized GEMM: y[c * ldy + r] = dot(w row r, x row c) for r < nr,
 * c < nc; weight rows ldw bytes apart, activation rows (in the dot type) ldx
 * bytes apart. Each weight block is unpacked once per tile of tokens and each
 * activation block reused across a tile of rows. Every output is bit-identical
 * to hx_get_vec_dot(type, HX_ISA_AVX2) on that pair (the per-row kernel is the
 * 1x1 tile). NULL where the type has no GEMM kernel at that ISA (use the
 * per-row kernel). AVX2 kernels: Q8_0, Q4_0, Q5_0, Q4_K, Q6_K; AVX512-VNNI: its
 * own Q8_0, Q4_0, Q5_0 (vpdpbusd, the same bits), AVX2's for the K-quants. */
typedef void (*hx_gemm_fn)(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                           size_t ldx, float *y, size_t ldy);
hx_gemm_fn hx_get_gemm(int type, hx_isa isa);
/* GEMM for batches (nc > 1, prefill): hx_get_gemm's kernel, except where a
 * faster batch kernel exists (AVX2: Q8_0, Q4_0, Q5_0, Q4_K, Q6_K on 8-row groups repacked
 * per call; AVX512-VNNI: Q8_0, Q4_0, Q5_0 likewise, Q4_K on 16-row groups);
 * that one is bit-identical to hx_get_vec_dot(type, HX_ISA_SCALAR) instead of
 * the AVX2 per-row kernel. hx_gemm_batch_ref_isa says which per-row kernel a
 * batch kernel's outputs equal. */
hx_gemm_fn hx_get_gemm_batch(int type, hx_isa isa);
hx_isa hx_gemm_batch_ref_isa(int type, hx_isa isa);
/* Tiled GEMM whose every output is summed in the order of llama.cpp's x86 vec_dot (and of
 * llamafile's tinyBLAS for batches): one accumulator, blocks in order, one hsum; i.e.
 * bit-identical to hx_get_vec_dot(type, HX_ISA_AVX2). AVX2: Q8_0, Q5_0, Q6_K; else NULL.
 * AVX512-VNNI's Q6_K (16-row groups) and Q8_0 (4-row groups) repack per call: for
 * batches (matvec: hx_get_gemm's tile). */
hx_gemm_fn hx_get_gemm_ggml(int type, hx_isa isa);
/* Q4_K batches summed in the orders of llama.cpp's repacked 8x8 kernels: every output
 * bit-identical to hx_dot_q4_K_ggml_gemm_avx2 (gemv_order false: its gemm, for rows of
 * activations in groups of 4) or hx_dot_q4_K_ggml_gemv_avx2 (true: its gemv). Weight rows
 * packed per call in groups of 8 (AVX2, AVX-512) or 16 (AVX512-VNNI, vpdpbusd); the gemv
 * order with fewer than 4 tokens (matvec) runs prefetching 4-row tiles instead; NULL below
 * AVX2. */
hx_gemm_fn hx_get_gemm_q4_K_ggml(hx_isa isa, bool gemv_order);
/* The lowest level (as an int, HX_ISA_*) whose decode kernels for `type` are `level`'s:
 * the same hx_get_gemm tile and hx_get_vec_dot row kernel, i.e. the same code for a
 * matvec. `level` itself when it has kernels of its own; -1 for a bad type or level.
 * Plain ints so include/helix_dev.h can declare it for helix-bg cpu-test. */
int hx_isa_matvec_same_as(int type, int level);

#endif
