/* wordpiece.h — BERT's WordPiece tokenizer (bert-base-uncased, all-MiniLM-L6-v2).
 *
 * Normalization as Hugging Face's BertNormalizer (clean text, spaces around CJK
 * ideographs, NFD + drop combining marks, lowercase), pre-tokenization as
 * BertPreTokenizer (split on whitespace, each punctuation character its own
 * word), then greedy longest-match-first WordPiece with "##" continuations;
 * a word longer than 100 characters or with no match becomes [UNK].
 * Vocabularies: vocab.txt (one token per line, id = line number), a Hugging
 * Face folder holding vocab.txt, or a GGUF with tokenizer.ggml.model = bert
 * (llama.cpp marks word-initial pieces with U+2581 and drops "##"). */
#ifndef HX_TOK_WORDPIECE_H
#define HX_TOK_WORDPIECE_H

#include "helix.h"
#include "gguf/gguf.h"

typedef struct hx_wordpiece hx_wordpiece;

hx_status hx_wordpiece_load(const char *path, hx_wordpiece **out, hx_error *e); /* vocab.txt, folder or .gguf */
hx_status hx_wordpiece_from_gguf(const hx_gguf *g, hx_wordpiece **out, hx_error *e);
void hx_wordpiece_free(hx_wordpiece *w);

/* Encode text into at most max_ids ids (max_ids >= 2), [CLS] text [SEP] when
 * add_special, truncating the text part to fit. Returns the number of ids. */
int hx_wordpiece_encode(const hx_wordpiece *w, const char *text, size_t len, bool add_special,
                        int32_t *ids, int max_ids);
int hx_wordpiece_n_vocab(const hx_wordpiece *w);
/* The token's text as in vocab.txt ("##ing" for continuations). */
const char *hx_wordpiece_token(const hx_wordpiece *w, int32_t id);

#endif
