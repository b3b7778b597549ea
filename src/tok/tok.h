/* tok.h — tokenizers: SentencePiece-style BPE (llama), GPT-2 byte-level BPE (gpt2), loaded from GGUF. */
#ifndef HX_TOK_H
#define HX_TOK_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "helix.h"

typedef enum { HX_TOK_SPM = 1, HX_TOK_BPE = 2, HX_TOK_WPM = 3 } hx_tok_kind;
/* token types as GGUF stores them (llama.cpp's llama_token_type) */
enum { HX_TT_NORMAL = 1, HX_TT_UNKNOWN = 2, HX_TT_CONTROL = 3, HX_TT_USER = 4, HX_TT_UNUSED = 5, HX_TT_BYTE = 6 };

typedef struct hx_tok hx_tok;

/* Load from a GGUF file's tokenizer.ggml.* metadata. */
hx_status hx_tok_load_gguf(const char *path, hx_tok **out, hx_error *e);
/* Load a SentencePiece tokenizer.model (protobuf ModelProto). */
hx_status hx_tok_load_spm_model(const char *path, hx_tok **out, hx_error *e);
/* Load a BERT WordPiece vocab.txt (lowercasing, accent stripping, [CLS]/[SEP]). */
hx_status hx_tok_load_vocab_txt(const char *path, hx_tok **out, hx_error *e);
/* Load a Hugging Face tokenizer.json (byte-level BPE: Llama 3, Qwen; byte-fallback BPE with U+2581
 * spaces: Gemma); added_tokens always matched as HF does when parse_special is set. A TemplateProcessing
 * post_processor that opens (closes) the single sequence with a special token sets BOS (EOS) and
 * add_bos (add_eos); tokenizer_config.json's settings are applied by the caller (hx_tok_set_*). */
hx_status hx_tok_load_hf_json(const char *path, hx_tok **out, hx_error *e);
void hx_tok_free(hx_tok *t);
/* Id of the vocabulary piece (raw, as stored) of n bytes, -1 when absent. */
int32_t hx_tok_find(const hx_tok *t, const char *piece, size_t n);
/* Override special ids (-1 clears) and whether encode adds BOS / EOS (from tokenizer_config.json). */
typedef enum { HX_TOK_SPECIAL_BOS, HX_TOK_SPECIAL_EOS, HX_TOK_SPECIAL_EOT, HX_TOK_SPECIAL_UNK, HX_TOK_SPECIAL_PAD } hx_tok_special;
void hx_tok_set_special(hx_tok *t, hx_tok_special which, int32_t id);
void hx_tok_set_add(hx_tok *t, bool add_bos, bool add_eos);

/* Encode text (n bytes) into ids. *ids is malloc'ed (caller frees), *n_ids its length.
 * add_special: BOS/EOS as the vocab asks; parse_special: control tokens in the text become their ids. */
hx_status hx_tok_encode(const hx_tok *t, const char *text, size_t n, bool add_special, bool parse_special,
                        int32_t **ids, size_t *n_ids, hx_error *e);
/* Raw vocab piece of id (NUL-terminated) or NULL when out of range. */
const char *hx_tok_piece(const hx_tok *t, int32_t id);
/* Decoded bytes of one token into buf (cap bytes); returns the byte count (may exceed cap: truncated). */
size_t hx_tok_decode_token(const hx_tok *t, int32_t id, char *buf, size_t cap);
int32_t hx_tok_n_vocab(const hx_tok *t);
int32_t hx_tok_bos(const hx_tok *t);
int32_t hx_tok_eos(const hx_tok *t);
int32_t hx_tok_eot(const hx_tok *t);
int32_t hx_tok_unk(const hx_tok *t);
int32_t hx_tok_pad(const hx_tok *t);
int32_t hx_tok_sep(const hx_tok *t);
int32_t hx_tok_cls(const hx_tok *t);
int32_t hx_tok_mask(const hx_tok *t);   /* all: -1 when absent */
bool hx_tok_adds_bos(const hx_tok *t);
bool hx_tok_adds_eos(const hx_tok *t);
bool hx_tok_add_space_prefix(const hx_tok *t);
bool hx_tok_is_eog(const hx_tok *t, int32_t id);  /* EOS or EOT: generation stops */
/* Cut ids to at most max_len keeping a trailing [SEP]/EOS; returns the new length. */
size_t hx_tok_truncate(const hx_tok *t, int32_t *ids, size_t n, size_t max_len);
hx_tok_kind hx_tok_kind_of(const hx_tok *t);
int hx_tok_type(const hx_tok *t, int32_t id);

/* Streaming decode: holds back an incomplete UTF-8 tail between tokens. */
typedef struct { char pend[8]; int n_pend; } hx_tok_stream;
/* Appends the decoded text of id to out (cap bytes), returns bytes written: complete, valid UTF-8 only
 * (bytes that can never form a character become U+FFFD). */
size_t hx_tok_stream_push(const hx_tok *t, hx_tok_stream *s, int32_t id, char *out, size_t cap);
/* UTF-8 at s[0..n): the length (1..4) of a valid character; 0 when s is a valid but incomplete
 * start of one; -k when its first k bytes can never form one (replace them by one U+FFFD). */
int hx_utf8_char(const unsigned char *s, size_t n);
#endif
