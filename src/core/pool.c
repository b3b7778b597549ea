/* pool.c — persistent worker threads, woken per job by a generation counter.
 *
 * A decode step is a few hundred jobs a few microseconds apart, so waking
 * sleeping threads through a condition variable for each (a futex wake per
 * worker, then the scheduler) cost more than the work on many cores: decode
 * stopped gaining past 8 threads (bench/RESULTS.md, "the device host's
 * 16-core Xeon"). Workers and the caller now spin on the counters for a short
 * while (HX_POOL_SPIN pauses, tens of microseconds) before they sleep, so
 * back-to-back jobs never touch the kernel and an idle pool still sleeps.
 *
 * Sleeping is the old protocol, made safe against the spinning side with
 * sequentially consistent flags: a worker registers in `sleepers` under the
 * mutex before it checks the generation; the caller bumps the generation,
 * then reads `sleepers` and broadcasts (under the mutex) only when one may be
 * asleep. Either the worker sees the new generation or the caller sees the
 * sleeper. The same pairing holds for the caller waiting on `pending`. */
#include "core/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* pauses a waiting thread spins through before it sleeps (~30-100 us) */
#define HX_POOL_SPIN 2048

struct hx_pool {
    int n_threads;             /* including the caller */
    pthread_t *threads;        /* n_threads - 1 workers */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_ullong generation;  /* bumped per job */
    atomic_int quit;
    atomic_int pending;        /* workers not yet done with the current job */
    atomic_int sleepers;       /* workers asleep on `wake` (or about to be) */
    atomic_int caller_sleeps;  /* the caller is asleep on `done` (or about to be) */
    /* current job (written before the generation is bumped) */
    hx_pool_fn fn;
    void *ctx;
    int64_t n_tasks;
    /* the task counter on a cache line of its own: every thread's fetch_add
     * takes the line, and the job's fields above are read without stalling */
    _Alignas(64) atomic_llong next;
    char pad[64 - sizeof(atomic_llong)];
};

typedef struct { hx_pool *p; int index; } worker_arg;

int hx_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void work(hx_pool *p, int thread) {
    hx_pool_fn fn = p->fn;
    void *ctx = p->ctx;
    int64_t n = p->n_tasks;
    for (;;) {
        long long t = atomic_fetch_add(&p->next, 1);
        if (t >= n) break;
        fn(ctx, t, thread);
    }
}

/* The next generation after `seen` (or quit): spin, then sleep. */
static uint64_t wait_job(hx_pool *p, uint64_t seen) {
    for (int i = 0; i < HX_POOL_SPIN; i++) {
        uint64_t g = atomic_load(&p->generation);
        if (g != seen || atomic_load(&p->quit)) return g;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    uint64_t g;
    while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    hx_pool *p = wa.p;
    uint64_t seen = 0;
    for (;;) {
        seen = wait_job(p, seen);
        if (atomic_load(&p->quit)) break;
        work(p, wa.index);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeps)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

hx_pool *hx_pool_create(int n_threads) {
    if (n_threads <= 0) n_threads = hx_cpu_count();
    if (n_threads > 512) n_threads = 512;
    hx_pool *p = aligned_alloc(_Alignof(hx_pool), sizeof *p); /* sizeof is a multiple of the alignment */
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->generation, 0);
    atomic_init(&p->quit, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_sleeps, 0);
    atomic_init(&p->next, 0);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof(pthread_t));
        if (!p->threads) { free(p); return NULL; }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa) { p->n_threads = i; break; }
            wa->p = p; wa->index = i;
            if (pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
                free(wa); p->n_threads = i; break;
            }
        }
    }
    return p;
}

void hx_pool_free(hx_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int hx_pool_threads(const hx_pool *p) { return p ? p->n_threads : 1; }

void hx_pool_run(hx_pool *p, int64_t n_tasks, hx_pool_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    /* every worker is past the last job (pending reached 0): the job's fields are free */
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    atomic_store(&p->pending, p->n_threads - 1);
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    work(p, 0);
    for (int i = 0; i < HX_POOL_SPIN && atomic_load(&p->pending) > 0; i++) cpu_relax();
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_sleeps, 1);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
        atomic_store(&p->caller_sleeps, 0);
        pthread_mutex_unlock(&p->mu);
    }
}
