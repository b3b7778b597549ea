/* jsongram.h — a byte-level JSON state machine for constrained decoding.
 *
 * response_format json_object: the output must be one JSON object. Before each
 * token the scheduler asks, for every vocabulary entry, whether its bytes can
 * follow what was generated so far (jg_feed on a copy of the state) and
 * whether the shortest completion that closes every open string and container
 * still fits in the tokens left (jg_dist), then samples only among the
 * allowed tokens (hx_sampler_sample_allowed). So the text always parses, even
 * when max_tokens cuts it short, as long as the vocabulary has single-byte
 * tokens for the closing characters (byte-level BPE and byte-fallback
 * SentencePiece vocabularies do).
 *
 * Strict RFC 8259: a top-level object; strings hold valid UTF-8 with no
 * control bytes; escapes \" \\ \/ \b \f \n \r \t \uXXXX (no surrogate
 * halves: \uD... is refused); numbers -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?;
 * literals true/false/null; no whitespace before the object and at most
 * JG_MAX_WS whitespace bytes (two line breaks) in a row (so a model cannot
 * stall in whitespace); nesting at most JG_MAX_DEPTH.
 */
#ifndef HX_SERVE_JSONGRAM_H
#define HX_SERVE_JSONGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JG_MAX_DEPTH 64
#define JG_MAX_WS 16
#define JG_MAX_KEYS 32
#define JG_MAX_KEY 64
/* room for any completion (jg_completion's cap) */
#define JG_MAX_COMPLETION (JG_MAX_DEPTH + 48 + JG_MAX_KEYS * (JG_MAX_KEY + 8))

/* Value types a schema property may take (bits); 0: any. */
enum { JG_T_STRING = 1, JG_T_NUMBER = 2, JG_T_INTEGER = 4, JG_T_BOOLEAN = 8, JG_T_NULL = 16, JG_T_ARRAY = 32,
       JG_T_OBJECT = 64 };

/* response_format json_schema, the part enforced: the top-level object has
 * exactly these keys, in this order, each with a value of its types. What
 * is inside nested arrays and objects, enums, formats, lengths, ranges and
 * optional keys are not enforced. */
typedef struct jg_schema {
    int n;
    char key[JG_MAX_KEYS][JG_MAX_KEY + 1]; /* as written between the quotes: no '"', '\\' or control bytes */
    uint8_t klen[JG_MAX_KEYS];
    uint8_t types[JG_MAX_KEYS];
    int tail;                              /* bytes of the shortest text of all keys and values */
} jg_schema;

typedef struct jg_state {
    uint64_t stack;   /* bit i: container at depth i+1 is an object (1) or an array (0) */
    uint8_t depth;    /* open containers */
    uint8_t mode;     /* what may come next (jsongram.c's enum) */
    uint8_t sub;      /* number sub-state, literal position or \u digits read */
    uint8_t lit;      /* literal being written: 0 true, 1 false, 2 null */
    uint8_t u8need;   /* UTF-8 continuation bytes still owed inside a string */
    uint8_t u8lo, u8hi; /* range of the next continuation byte */
    uint8_t ws;       /* whitespace bytes in a row */
    uint8_t nl;       /* line breaks in that run */
    uint8_t is_key;   /* the open string is an object key */
    uint8_t num_int;  /* the open number must be an integer (schema) */
    uint8_t kcount;   /* schema: top-level keys started */
    uint8_t kpos;     /* schema: bytes of the open key written */
    const jg_schema *sch; /* NULL: any object */
} jg_state;

/* The state before any output; sch (may be NULL; must outlive the state) constrains the keys. */
void jg_init(jg_state *s, const jg_schema *sch);
/* Feeds n bytes; false (s then undefined) when they cannot continue a JSON object. */
bool jg_feed(jg_state *s, const char *p, size_t n);
/* The top-level object is complete: only the end of generation may follow. */
bool jg_done(const jg_state *s);
/* Bytes of the shortest text that completes the object from s. */
int jg_dist(const jg_state *s);
/* That text (cap bytes, NUL-terminated); returns its length. */
int jg_completion(const jg_state *s, char *buf, int cap);

#endif
