/* cpu.c — placeholder until step 4. */
#include "quant/quant_formats.h"
hx_vec_dot_fn hx_get_vec_dot(int type, hx_isa isa) { (void)type; (void)isa; return NULL; }
