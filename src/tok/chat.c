/* chat.c — chat template families by marker strings (no Jinja): ChatML/Qwen, Llama 3, Gemma, Llama 2. */
#include "tok/chat.h"
#include <stdlib.h>
#include <string.h>
#include "core/core.h"

hx_chat_kind hx_chat_detect(const char *t) {
    if (!t) return HX_CHAT_UNKNOWN;
    if (strstr(t, "<|im_start|>")) return HX_CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>")) return HX_CHAT_LLAMA3;
    if (strstr(t, "<start_of_turn>")) return HX_CHAT_GEMMA;
    if (strstr(t, "[INST]")) return HX_CHAT_LLAMA2;
    return HX_CHAT_UNKNOWN;
}

const char *hx_chat_name(hx_chat_kind k) {
    static const char *n[] = {"unknown", "chatml", "llama3", "gemma", "llama2"};
    return (unsigned)k < 5 ? n[k] : "unknown";
}

hx_chat_kind hx_chat_fallback(const char *arch, bool (*has_token)(const char *piece, void *user), void *user) {
    if (has_token) {
        if (has_token("<|im_start|>", user) && has_token("<|im_end|>", user)) return HX_CHAT_CHATML;
        if (has_token("<|start_header_id|>", user) && has_token("<|eot_id|>", user)) return HX_CHAT_LLAMA3;
        if (has_token("<start_of_turn>", user) && has_token("<end_of_turn>", user)) return HX_CHAT_GEMMA;
    }
    if (!arch) return HX_CHAT_UNKNOWN;
    if (!strcmp(arch, "gemma3")) return HX_CHAT_GEMMA;
    if (!strcmp(arch, "qwen2") || !strcmp(arch, "qwen3")) return HX_CHAT_CHATML;
    return HX_CHAT_UNKNOWN;
}

typedef struct { char *p; size_t n, cap; bool oom; } sbuf;
static void sput(sbuf *b, const char *s) {
    size_t l = strlen(s);
    if (b->n + l + 1 > b->cap) {
        size_t nc = (b->n + l + 1) * 2; char *q = realloc(b->p, nc);
        if (!q) { b->oom = true; return; }
        b->p = q; b->cap = nc;
    }
    memcpy(b->p + b->n, s, l + 1); b->n += l;
}

hx_status hx_chat_format(hx_chat_kind k, const hx_chat_msg *m, size_t n, bool add_assistant, char **out, hx_error *e) {
    *out = NULL;
    sbuf b = {0};
    sput(&b, "");
    for (size_t i = 0; i < n; i++)
        if (!m[i].role || !m[i].content) { free(b.p); return hx_err(e, HX_ERR_ARG, "chat: message %zu has no role or content", i); }
    switch (k) {
    case HX_CHAT_CHATML:
        for (size_t i = 0; i < n; i++) { sput(&b, "<|im_start|>"); sput(&b, m[i].role); sput(&b, "\n"); sput(&b, m[i].content); sput(&b, "<|im_end|>\n"); }
        if (add_assistant) sput(&b, "<|im_start|>assistant\n");
        break;
    case HX_CHAT_LLAMA3:
        for (size_t i = 0; i < n; i++) {
            sput(&b, "<|start_header_id|>"); sput(&b, m[i].role); sput(&b, "<|end_header_id|>\n\n");
            sput(&b, m[i].content); sput(&b, "<|eot_id|>");
        }
        if (add_assistant) sput(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case HX_CHAT_GEMMA: {
        const char *sys = NULL;  /* Gemma has no system role: prepended to the first user turn */
        for (size_t i = 0; i < n; i++) {
            if (!strcmp(m[i].role, "system")) { sys = m[i].content; continue; }
            bool asst = !strcmp(m[i].role, "assistant");
            sput(&b, "<start_of_turn>"); sput(&b, asst ? "model" : m[i].role); sput(&b, "\n");
            if (sys && !asst) { sput(&b, sys); sput(&b, "\n\n"); sys = NULL; }
            sput(&b, m[i].content); sput(&b, "<end_of_turn>\n");
        }
        if (add_assistant) sput(&b, "<start_of_turn>model\n");
        break;
    }
    case HX_CHAT_LLAMA2: {
        const char *sys = NULL;
        for (size_t i = 0; i < n; i++) {
            if (!strcmp(m[i].role, "system")) { sys = m[i].content; continue; }
            if (!strcmp(m[i].role, "assistant")) { sput(&b, " "); sput(&b, m[i].content); sput(&b, " </s>"); continue; }
            sput(&b, b.n ? "<s>[INST] " : "[INST] ");
            if (sys) { sput(&b, "<<SYS>>\n"); sput(&b, sys); sput(&b, "\n<</SYS>>\n\n"); sys = NULL; }
            sput(&b, m[i].content); sput(&b, " [/INST]");
        }
        break;
    }
    default:
        free(b.p);
        return hx_err(e, HX_ERR_UNSUPPORTED, "chat: unrecognized chat template (supported: ChatML/Qwen, Llama 3, Gemma, Llama 2)");
    }
    if (b.oom) { free(b.p); return hx_err(e, HX_ERR_NOMEM, "chat: out of memory"); }
    *out = b.p;
    return HX_OK;
}
