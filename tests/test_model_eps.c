/* test_model_eps.c — a GGUF whose norm epsilon is NaN, infinite, zero or
 * negative fails to load with an error naming the key (it used to load and
 * generate <unk> from NaN activations); sane values load. Only the metadata
 * matters here, so the files hold the config keys and no tensors. */
#include "gguf/gguf.h"
#include "model/model.h"
#include "core/core.h"
#include "test_util.h"

#include <unistd.h>

static char path[128];

/* Writes a llama config with `key` = eps (f32) and parses it. */
static hx_status config_with_eps(const char *key, float eps, hx_error *e) {
    hx_gguf_writer *w = hx_gguf_writer_new(0);
    hx_gguf_writer_set_str(w, "general.architecture", "llama");
    hx_gguf_writer_set_u32(w, "llama.block_count", 2);
    hx_gguf_writer_set_u32(w, "llama.embedding_length", 64);
    hx_gguf_writer_set_u32(w, "llama.attention.head_count", 4);
    hx_gguf_writer_set_u32(w, "llama.feed_forward_length", 128);
    hx_gguf_writer_set_u32(w, "llama.vocab_size", 256);
    if (key) hx_gguf_writer_set_f32(w, key, eps);
    hx_status st = hx_gguf_writer_write(w, path, e);
    hx_gguf_writer_free(w);
    if (st) return st;
    hx_gguf *g = NULL;
    if ((st = hx_gguf_open(path, NULL, &g, e))) return st;
    hx_model_config c;
    st = hx_model_config_from_gguf(g, &c, e);
    if (!st && key) CHECK_NEAR(c.norm_eps, eps, 0);
    if (!st && !key) CHECK_NEAR(c.norm_eps, 1e-5f, 0); /* absent: the default */
    hx_gguf_close(g);
    return st;
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/hx_eps_%ld.gguf", (long)getpid());
    hx_error e = {0};
    const char *keys[] = {"llama.attention.layer_norm_rms_epsilon", "llama.attention.layer_norm_epsilon"};
    const float bad[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, -1e-5f, 1.5f};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            memset(&e, 0, sizeof e);
            hx_status st = config_with_eps(keys[k], bad[i], &e);
            CHECKF(st == HX_ERR_FORMAT && strstr(e.msg, keys[k]) && strstr(e.msg, path),
                   "eps %g under %s: status %d, message '%s'", (double)bad[i], keys[k], st, e.msg);
        }
        const float good[] = {1e-5f, 1e-6f, 1e-12f};
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
            CHECKF(config_with_eps(keys[k], good[i], &e) == HX_OK, "eps %g: %s", (double)good[i], e.msg);
    }
    CHECKF(config_with_eps(NULL, 0, &e) == HX_OK, "%s", e.msg);
    unlink(path);
    return t_done("test_model_eps");
}
