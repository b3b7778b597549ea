/* search.h — declared in the public include/helix_kb.h (the KB engine is part of
 * libhelix's interface: helix-bg's KB commands use it as any program would). */
#ifndef HX_KB_SEARCH_H
#define HX_KB_SEARCH_H
#include "helix_kb.h"
#endif
