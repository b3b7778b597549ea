/* llm.h — declared in the public include/helix_kb.h (the KB engine is part of
 * libhelix's interface: helix-bg's KB commands use it as any program would).
 * Below: what the think stage uses beyond the public declarations. */
#ifndef HX_KB_LLM_H
#define HX_KB_LLM_H
#include "helix_kb.h"

/* kb_llm_prompt_classify with a line about each label: about[j] (may be NULL)
 * follows label j in the list, e.g. titles of notes filed under it, so a
 * label's name is not all the model knows of a topic. */
char *kb_llm_prompt_classify_about(kb_llm *l, const char *title, const char *text, const char *const *labels,
                                   const char *const *about, int n_labels);
#endif
