/* pool.h — a persistent thread pool. hx_pool_run() splits [0, n) into tasks
 * handed out by an atomic counter; the calling thread works too. Not reentrant:
 * one hx_pool_run at a time per pool. */
#ifndef HX_POOL_H
#define HX_POOL_H

#include "helix.h"

typedef struct hx_pool hx_pool;
/* fn(ctx, task, thread_index) for task in [0, n_tasks); thread_index < n_threads */
typedef void (*hx_pool_fn)(void *ctx, int64_t task, int thread);

/* n_threads <= 0: use the number of online CPUs. */
hx_pool *hx_pool_create(int n_threads);
void hx_pool_free(hx_pool *p);
int hx_pool_threads(const hx_pool *p);
void hx_pool_run(hx_pool *p, int64_t n_tasks, hx_pool_fn fn, void *ctx);
int hx_cpu_count(void);

#endif
