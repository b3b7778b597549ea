/* chat.h — recognize a model's chat template family and format messages with it. */
#ifndef HX_CHAT_H
#define HX_CHAT_H
#include <stdbool.h>
#include <stddef.h>
#include "helix.h"

typedef enum { HX_CHAT_UNKNOWN = 0, HX_CHAT_CHATML, HX_CHAT_LLAMA3, HX_CHAT_GEMMA, HX_CHAT_LLAMA2 } hx_chat_kind;
typedef struct { const char *role; const char *content; } hx_chat_msg;  /* role: system / user / assistant */

/* Family of a tokenizer.chat_template string (NULL or unrecognized -> HX_CHAT_UNKNOWN). */
hx_chat_kind hx_chat_detect(const char *tmpl);
const char *hx_chat_name(hx_chat_kind k);
/* The family for a model whose file carries no (known) template: by the
 * turn markers its vocabulary has (has_token answers for a piece), else by
 * architecture (gemma3 -> Gemma, qwen2/qwen3 -> ChatML). */
hx_chat_kind hx_chat_fallback(const char *arch, bool (*has_token)(const char *piece, void *user), void *user);
/* Render messages as the family's prompt text (BOS not included: the tokenizer adds it);
 * add_assistant appends the header that opens the assistant's turn. *out is malloc'ed. */
hx_status hx_chat_format(hx_chat_kind k, const hx_chat_msg *msgs, size_t n, bool add_assistant, char **out, hx_error *e);
#endif
