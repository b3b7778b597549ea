/* pool.h — a persistent thread pool. hx_pool_run() splits [0, n) into tasks
 * handed out by an atomic counter; the calling thread works too. Not reentrant:
 * one hx_pool_run at a time per pool. */
#ifndef HX_POOL_H
#define HX_POOL_H

#include "helix.h"

/* hx_pool and hx_pool_create/free/threads/run are public: helix.h. */
int hx_cpu_count(void);

#endif
