/* dev_describe.c — hx_dev_gguf_describe (helix_dev.h, helix-bg load-model):
 * a GGUF file's metadata (long arrays summarized), tensor inventory and the
 * derived model config, as text or as one JSON object. */
#include "helix_dev.h"

#include "core/core.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_PREVIEW 6   /* elements shown of a long array */
#define STR_PREVIEW 80    /* characters shown of a long string */

static void print_str(FILE *f, hx_gguf_str s, uint64_t max) {
    fputc('"', f);
    uint64_t n = s.len < max ? s.len : max;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('"', f);
    if (s.len > max) fprintf(f, "... (%llu bytes)", (unsigned long long)s.len);
}

static void print_scalar(FILE *f, const hx_gguf_value *v) {
    switch (v->type) {
    case HX_GGUF_U8: case HX_GGUF_U16: case HX_GGUF_U32: case HX_GGUF_U64:
        fprintf(f, "%llu", (unsigned long long)v->u64); break;
    case HX_GGUF_I8: case HX_GGUF_I16: case HX_GGUF_I32: case HX_GGUF_I64:
        fprintf(f, "%lld", (long long)v->i64); break;
    case HX_GGUF_F32: case HX_GGUF_F64: fprintf(f, "%g", v->f64); break;
    case HX_GGUF_BOOL: fputs(v->b ? "true" : "false", f); break;
    case HX_GGUF_STRING: print_str(f, v->str, STR_PREVIEW); break;
    default: fputs("?", f);
    }
}

static void print_value(FILE *f, const hx_gguf_value *v) {
    if (v->type != HX_GGUF_ARRAY) { print_scalar(f, v); return; }
    fprintf(f, "[%s x %llu] ", hx_gguf_vtype_name(v->arr.elem_type), (unsigned long long)v->arr.count);
    uint64_t n = v->arr.count < ARRAY_PREVIEW ? v->arr.count : ARRAY_PREVIEW;
    fputc('[', f);
    for (uint64_t i = 0; i < n; i++) {
        if (i) fputs(", ", f);
        if (v->arr.elems) print_value(f, &v->arr.elems[i]);
        else if (v->arr.elem_type == HX_GGUF_F32 || v->arr.elem_type == HX_GGUF_F64) fprintf(f, "%g", hx_gguf_arr_f64(v, i));
        else fprintf(f, "%lld", (long long)hx_gguf_arr_i64(v, i));
    }
    if (v->arr.count > n) fputs(", ...", f);
    fputc(']', f);
}

static cJSON *json_value(const hx_gguf_value *v) {
    switch (v->type) {
    case HX_GGUF_U8: case HX_GGUF_U16: case HX_GGUF_U32: case HX_GGUF_U64: return cJSON_CreateNumber((double)v->u64);
    case HX_GGUF_I8: case HX_GGUF_I16: case HX_GGUF_I32: case HX_GGUF_I64: return cJSON_CreateNumber((double)v->i64);
    case HX_GGUF_F32: case HX_GGUF_F64: return cJSON_CreateNumber(v->f64);
    case HX_GGUF_BOOL: return cJSON_CreateBool(v->b);
    case HX_GGUF_STRING: {
        uint64_t n = v->str.len < 4096 ? v->str.len : 4096;
        char *s = malloc(n + 1);
        if (!s) return cJSON_CreateNull();
        memcpy(s, v->str.ptr, n);
        s[n] = 0;
        cJSON *j = cJSON_CreateString(s);
        free(s);
        return j;
    }
    case HX_GGUF_ARRAY: {
        /* summarized: type, count, first few elements */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "array_of", hx_gguf_vtype_name(v->arr.elem_type));
        cJSON_AddNumberToObject(o, "count", (double)v->arr.count);
        cJSON *first = cJSON_AddArrayToObject(o, "first");
        uint64_t n = v->arr.count < ARRAY_PREVIEW ? v->arr.count : ARRAY_PREVIEW;
        for (uint64_t i = 0; i < n; i++) {
            if (v->arr.elems) cJSON_AddItemToArray(first, json_value(&v->arr.elems[i]));
            else if (v->arr.elem_type == HX_GGUF_F32 || v->arr.elem_type == HX_GGUF_F64)
                cJSON_AddItemToArray(first, cJSON_CreateNumber(hx_gguf_arr_f64(v, i)));
            else cJSON_AddItemToArray(first, cJSON_CreateNumber((double)hx_gguf_arr_i64(v, i)));
        }
        return o;
    }
    default: return cJSON_CreateNull();
    }
}

static char *gstr(hx_gguf_str s) {
    char *c = malloc(s.len + 1);
    if (c) { memcpy(c, s.ptr, s.len); c[s.len] = 0; }
    return c;
}

/* Closes the report's stream; *out holds the text, or NULL on failure. */
static hx_status finish(FILE *f, char **out, hx_error *e) {
    if (fclose(f) == 0 && *out) return HX_OK;
    free(*out);
    *out = NULL;
    return hx_err(e, HX_ERR_NOMEM, "hx_dev_gguf_describe: out of memory");
}

hx_status hx_dev_gguf_describe(const char *path, bool json, bool prefault, char **out, hx_error *e) {
    if (!path || !out) return hx_err(e, HX_ERR_ARG, "hx_dev_gguf_describe: NULL argument");
    *out = NULL;
    hx_gguf *g = NULL;
    hx_gguf_open_opts oo = {.prefault = prefault};
    double t0 = hx_now_s();
    hx_status st = hx_gguf_open(path, &oo, &g, e);
    if (st) return st;
    size_t len = 0;
    FILE *f = open_memstream(out, &len);
    if (!f) {
        hx_gguf_close(g);
        return hx_err(e, HX_ERR_NOMEM, "hx_dev_gguf_describe: out of memory");
    }
    double t_open = hx_now_s() - t0;
    /* config: a model we cannot run still gets its inventory printed */
    hx_model_config cfg;
    hx_error ce = {0};
    bool have_cfg = hx_model_config_from_gguf(g, &cfg, &ce) == HX_OK;
    uint64_t type_bytes[HX_TYPE_COUNT] = {0}, type_count[HX_TYPE_COUNT] = {0}, total = 0, params = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const hx_gguf_tensor *t = &g->tensors[i];
        if (t->type >= 0 && t->type < HX_TYPE_COUNT) { type_bytes[t->type] += t->n_bytes; type_count[t->type]++; }
        total += t->n_bytes;
        params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "file", path);
        cJSON_AddNumberToObject(root, "file_size", (double)g->file_size);
        cJSON_AddNumberToObject(root, "gguf_version", g->version);
        cJSON_AddNumberToObject(root, "alignment", (double)g->alignment);
        cJSON *md = cJSON_AddObjectToObject(root, "metadata");
        for (uint64_t i = 0; i < g->n_kv; i++) {
            char *k = gstr(g->kv[i].key);
            if (k) cJSON_AddItemToObject(md, k, json_value(&g->kv[i].value));
            free(k);
        }
        cJSON *ts = cJSON_AddArrayToObject(root, "tensors");
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const hx_gguf_tensor *t = &g->tensors[i];
            cJSON *o = cJSON_CreateObject();
            char *n = gstr(t->name);
            cJSON_AddStringToObject(o, "name", n ? n : "");
            free(n);
            cJSON_AddStringToObject(o, "type", hx_type_name(t->type));
            cJSON *sh = cJSON_AddArrayToObject(o, "shape");
            for (int d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->ne[d]));
            cJSON_AddNumberToObject(o, "bytes", (double)t->n_bytes);
            cJSON_AddNumberToObject(o, "offset", (double)t->offset);
            cJSON_AddItemToArray(ts, o);
        }
        cJSON *mix = cJSON_AddObjectToObject(root, "quant_mix");
        for (int t = 0; t < HX_TYPE_COUNT; t++)
            if (type_count[t]) {
                cJSON *o = cJSON_AddObjectToObject(mix, hx_type_name(t));
                cJSON_AddNumberToObject(o, "tensors", (double)type_count[t]);
                cJSON_AddNumberToObject(o, "bytes", (double)type_bytes[t]);
            }
        cJSON_AddNumberToObject(root, "tensor_bytes", (double)total);
        cJSON_AddNumberToObject(root, "parameters", (double)params);
        if (have_cfg) {
            cJSON *c = cJSON_AddObjectToObject(root, "config");
            cJSON_AddStringToObject(c, "arch", cfg.arch_name);
            cJSON_AddNumberToObject(c, "n_layer", cfg.n_layer);
            cJSON_AddNumberToObject(c, "n_embd", cfg.n_embd);
            cJSON_AddNumberToObject(c, "n_head", cfg.n_head);
            cJSON_AddNumberToObject(c, "n_head_kv", cfg.n_head_kv);
            cJSON_AddNumberToObject(c, "head_dim", cfg.head_dim);
            cJSON_AddNumberToObject(c, "n_ff", cfg.n_ff);
            cJSON_AddNumberToObject(c, "n_vocab", cfg.n_vocab);
            cJSON_AddNumberToObject(c, "n_ctx_train", cfg.n_ctx_train);
            cJSON_AddNumberToObject(c, "rope_base", cfg.rope_base);
            cJSON_AddNumberToObject(c, "rope_base_swa", cfg.rope_base_swa);
            cJSON_AddStringToObject(c, "rope_style", cfg.rope_style == HX_ROPE_NEOX ? "neox" : "norm");
            cJSON_AddNumberToObject(c, "norm_eps", cfg.norm_eps);
            cJSON_AddNumberToObject(c, "sliding_window", cfg.sliding_window);
            cJSON_AddBoolToObject(c, "tied_output", cfg.tied_output);
        } else {
            cJSON_AddStringToObject(root, "config_error", ce.msg);
        }
        char *s = cJSON_Print(root);
        if (s) { fputs(s, f); fputc('\n', f); free(s); }
        cJSON_Delete(root);
        hx_gguf_close(g);
        return finish(f, out, e);
    }
    fprintf(f, "file:        %s\n", path);
    fprintf(f, "size:        %llu bytes (%.2f MiB), GGUF v%u, alignment %llu, opened in %.1f ms%s\n",
           (unsigned long long)g->file_size, g->file_size / 1048576.0, g->version,
           (unsigned long long)g->alignment, t_open * 1e3, prefault ? " (prefaulted)" : "");
    fprintf(f, "\nmetadata (%llu keys):\n", (unsigned long long)g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        fprintf(f, "  %-44.*s ", (int)g->kv[i].key.len, g->kv[i].key.ptr);
        print_value(f, &g->kv[i].value);
        fputc('\n', f);
    }
    fprintf(f, "\ntensors (%llu):\n", (unsigned long long)g->n_tensors);
    fprintf(f, "  %-40s %-5s %-22s %12s\n", "name", "type", "shape", "bytes");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const hx_gguf_tensor *t = &g->tensors[i];
        char shape[64] = "", *p = shape;
        for (int d = 0; d < t->n_dims; d++)
            p += snprintf(p, sizeof shape - (size_t)(p - shape), "%s%lld", d ? " x " : "", (long long)t->ne[d]);
        fprintf(f, "  %-40.*s %-5s %-22s %12llu\n", (int)t->name.len, t->name.ptr, hx_type_name(t->type), shape,
               (unsigned long long)t->n_bytes);
    }
    fprintf(f, "\nquant mix:\n");
    for (int t = 0; t < HX_TYPE_COUNT; t++)
        if (type_count[t])
            fprintf(f, "  %-5s %5llu tensors %14llu bytes (%5.1f%%)\n", hx_type_name(t), (unsigned long long)type_count[t],
                   (unsigned long long)type_bytes[t], total ? 100.0 * type_bytes[t] / total : 0.0);
    fprintf(f, "  total %5llu tensors %14llu bytes, %llu parameters\n", (unsigned long long)g->n_tensors,
           (unsigned long long)total, (unsigned long long)params);
    fprintf(f, "\nmodel config:\n");
    if (!have_cfg) {
        fprintf(f, "  (not derived: %s)\n", ce.msg);
    } else {
        fprintf(f, "  arch          %s%s%s\n", cfg.arch_name, cfg.name[0] ? " — " : "", cfg.name);
        fprintf(f, "  layers        %d\n  n_embd        %d\n  heads         %d (kv heads %d, head dim %d)\n",
               cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_head_kv, cfg.head_dim);
        fprintf(f, "  ffn           %d\n  vocab         %d\n  context       %d\n", cfg.n_ff, cfg.n_vocab, cfg.n_ctx_train);
        if (cfg.arch != HX_ARCH_BERT) {
            fprintf(f, "  rope          %s, base %g", cfg.rope_style == HX_ROPE_NEOX ? "neox" : "norm", cfg.rope_base);
            if (cfg.sliding_window) fprintf(f, " (sliding-window layers: base %g, window %d)", cfg.rope_base_swa, cfg.sliding_window);
            fputc('\n', f);
        }
        fprintf(f, "  norm          %s, eps %g\n", cfg.norm_is_layernorm ? "layernorm" : "rmsnorm", cfg.norm_eps);
        fprintf(f, "  flags        %s%s%s%s%s%s\n", cfg.qkv_bias ? " qkv-bias" : "", cfg.qk_norm ? " qk-norm" : "",
               cfg.post_norms ? " post-norms" : "", cfg.embd_scale ? " embd-scale" : "",
               cfg.tied_output ? " tied-output" : "", cfg.act == HX_ACT_SILU ? " silu" : cfg.act == HX_ACT_GELU_TANH ? " gelu-tanh" : " gelu");
    }
    hx_gguf_close(g);
    return finish(f, out, e);
}
