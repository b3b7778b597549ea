/* vnni_emu.c — src/quant/gemm_avx512.c compiled for AVX2 with vpdpbusd emulated
 * by SIMDe, its names suffixed _emu (see there); linked into test_vnni only. */
#define HX_SIMDE_EMU 1
#include "../src/quant/gemm_avx512.c"
