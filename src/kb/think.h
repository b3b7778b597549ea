/* think.h — the stage after a pass: what a person would act on.
 *
 * Reads the KB (data.log, embeddings.bin, the insights.json the pass wrote)
 * and adds to insights.json (rewritten atomically):
 *   classifications  every live entry: {id, topic, predicted, probability, method}
 *   misfiled         entries whose predicted topic differs with probability >
 *                    misfiled (default 0.8), most confident first
 *   patterns         groups of related entries across topics (connected
 *                    components of the pass's cross-links and near-duplicates,
 *                    at least 3 entries in at least 2 topics): {members, topics,
 *                    name, description}
 * and, with an LLM (kb/llm.h):
 *   summaries        {id, summary}: one sentence for entries of more than
 *                    summarize_min_words words
 *   digests          {topic, digest}: from the topic's most central entries
 *   merge_suggestions {a, b, suggestion}: for each near-duplicate pair
 * Classification without an LLM is the nearest topic centroid (kb/classify.h);
 * with one it is hx_classify over the topics as labels. Every LLM answer is
 * cached in llm.bin (saved after each batch, so a killed pass keeps what it
 * finished); a later pass asks the model only about what changed. */
#ifndef HX_KB_THINK_H
#define HX_KB_THINK_H

#include "kb/kb.h"
#include "kb/llm.h"

typedef struct kb_think_opts {
    kb_llm *llm;                 /* NULL: centroid classification and unnamed patterns only */
    float misfiled;              /* default 0.8 */
    int summarize_min_words;     /* default 60 */
    int max_labels;              /* the largest topics offered to the LLM, default 24 */
    bool progress;               /* a line per LLM batch on stderr */
} kb_think_opts;

kb_think_opts kb_think_defaults(void);

typedef struct kb_think_stats {
    size_t classified, misfiled, patterns, summaries, digests, merges;
    size_t llm_asked;            /* prompts the model ran this time (the rest came from llm.bin) */
    double seconds;
} kb_think_stats;

hx_status kb_think(const char *dir, kb_embedder *em, hx_pool *pool, const kb_think_opts *o, bool print,
                   kb_think_stats *st, hx_error *e);

#endif
