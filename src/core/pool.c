/* pool.c — persistent worker threads, woken per job by a generation counter.
 *
 * A decode step is a few hundred jobs a few microseconds apart, so waking
 * sleeping threads through a condition variable for each (a futex wake per
 * worker, then the scheduler) cost more than the work on many cores: decode
 * stopped gaining past 8 threads (bench/RESULTS.md, "the device host's
 * 16-core Xeon"). Workers and the caller spin on the counters for a short
 * while (HX_POOL_SPIN pauses, tens of microseconds) before they sleep, so
 * back-to-back jobs never touch the kernel and an idle pool still sleeps.
 *
 * Sleeping waits on the counter word itself (addr_wait: a futex on Linux, a
 * mutex and condition variable elsewhere), made safe against the spinning
 * side with sequentially consistent flags: a worker registers in `sleepers`
 * before it checks the generation; the caller bumps the generation, then
 * reads `sleepers` and wakes only when one may be asleep. Either the worker
 * sees the new generation or the caller sees the sleeper (and a futex wait
 * returns at once when the word changed before it slept). The same pairing
 * holds for the caller waiting on `done` (`caller_sleeps`). On Linux a wake
 * is one system call and neither side takes a lock.
 *
 * The caller waits for the job's tasks, not for the workers: a worker that
 * comes late (descheduled on a busy machine, or still waking) and finds every
 * task taken owes nothing, so the caller never waits for a thread that did no
 * work. Tasks are claimed by compare-and-swap on one word holding the job's
 * number and the count of tasks not yet handed out, so a late worker cannot
 * take a task of another job: a claim succeeds only while its job is current
 * and has tasks left, which keeps the job from completing, so the caller has
 * not begun writing the next job's fields and the ones read before the claim
 * are that job's. (The word counts down rather than up: a bound read from
 * the fields would not be safe to test before the claim.) */
#include "core/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif
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
    pthread_mutex_t mu;        /* addr_wait's fallback where there is no futex */
    pthread_cond_t cv;
    /* int words: a futex is 32 bits. The generation may wrap; a worker takes
     * part in every job (the caller waits for all), so it never misses 2^32. */
    atomic_int generation;     /* bumped per job: the job's number */
    atomic_int quit;
    atomic_int sleepers;       /* workers asleep on `generation` (or about to be) */
    atomic_int caller_sleeps;  /* the caller is asleep on `done` (or about to be) */
    /* current job, written before `next` names it; atomics because a late
     * worker may read them while the caller writes the next job's */
    _Atomic(hx_pool_fn) fn;
    _Atomic(void *) ctx;
    atomic_int n_tasks;
    atomic_int done;           /* tasks of the current job finished */
    /* (job number << 32) | tasks not yet handed out, on a cache line of its own: every
     * claim takes the line, and the fields above are read without stalling */
    _Alignas(64) atomic_ullong next;
    char pad[64 - sizeof(atomic_ullong)];
};

/* a job's tasks fit the word's 32-bit count and the int counters */
#define HX_POOL_MAX_TASKS (1 << 30)

typedef struct { hx_pool *p; int index; } worker_arg;

int hx_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Sleep while *a == v; may return early (callers loop on their condition). */
static void addr_wait(hx_pool *p, atomic_int *a, int v) {
#ifdef __linux__
    (void)p;
    syscall(SYS_futex, (int *)a, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
#else
    pthread_mutex_lock(&p->mu);
    while (atomic_load(a) == v) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
#endif
}

/* Wake every thread asleep on a (after *a was changed). */
static void addr_wake(hx_pool *p, atomic_int *a) {
#ifdef __linux__
    (void)p;
    syscall(SYS_futex, (int *)a, FUTEX_WAKE_PRIVATE, 1 << 30, NULL, NULL, 0);
#else
    (void)a;
    pthread_mutex_lock(&p->mu); /* the sleeper checks *a under the mutex: no wake is lost */
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
#endif
}

/* Run tasks of job `job` until none is left; returns how many it ran. */
static int work(hx_pool *p, int thread, unsigned job) {
    uint64_t w = atomic_load_explicit(&p->next, memory_order_acquire);
    if ((unsigned)(w >> 32) != job) return 0; /* over (and perhaps another begun) */
    hx_pool_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
    int64_t n = atomic_load_explicit(&p->n_tasks, memory_order_relaxed); /* used only after a claim */
    int ran = 0;
    for (;;) {
        if ((unsigned)(w >> 32) != job || (uint32_t)w == 0) return ran;
        if (!atomic_compare_exchange_weak_explicit(&p->next, &w, w - 1, memory_order_acq_rel, memory_order_acquire))
            continue; /* w reloaded */
        fn(ctx, n - (int64_t)(uint32_t)w, thread); /* tasks in order 0, 1, ... */
        ran++;
        w = atomic_load_explicit(&p->next, memory_order_acquire);
    }
}

/* Count ran tasks of the current job as done; wake the caller at the last. */
static void finish(hx_pool *p, int ran) {
    if (!ran) return;
    int n = atomic_load_explicit(&p->n_tasks, memory_order_relaxed); /* the job is current: its tasks are ours */
    if (atomic_fetch_add(&p->done, ran) + ran == n && atomic_load(&p->caller_sleeps)) addr_wake(p, &p->done);
}

/* The next generation after `seen` (or quit): spin, then sleep. */
static int wait_job(hx_pool *p, int seen) {
    for (int i = 0; i < HX_POOL_SPIN; i++) {
        int g = atomic_load(&p->generation);
        if (g != seen || atomic_load(&p->quit)) return g;
        cpu_relax();
    }
    atomic_fetch_add(&p->sleepers, 1);
    int g;
    while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->quit)) addr_wait(p, &p->generation, seen);
    atomic_fetch_sub(&p->sleepers, 1);
    return g;
}

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    hx_pool *p = wa.p;
    int seen = 0;
    for (;;) {
        seen = wait_job(p, seen);
        if (atomic_load(&p->quit)) break;
        finish(p, work(p, wa.index, (unsigned)seen));
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
    pthread_cond_init(&p->cv, NULL);
    atomic_init(&p->generation, 0);
    atomic_init(&p->quit, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->n_tasks, 0);
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
    atomic_store(&p->quit, 1);
    /* a worker that registered as a sleeper re-checks quit before each wait;
     * bumping the word makes a wait that is about to start return at once */
    atomic_fetch_add(&p->generation, 1);
    addr_wake(p, &p->generation);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

int hx_pool_threads(const hx_pool *p) { return p ? p->n_threads : 1; }

/* Jobs of more than HX_POOL_MAX_TASKS tasks run as several, offset. */
typedef struct { hx_pool_fn fn; void *ctx; int64_t t0; } part_job;
static void part_task(void *ctx, int64_t t, int thread) {
    const part_job *j = ctx;
    j->fn(j->ctx, j->t0 + t, thread);
}

void hx_pool_run(hx_pool *p, int64_t n_tasks, hx_pool_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    if (n_tasks > HX_POOL_MAX_TASKS) {
        for (int64_t t0 = 0; t0 < n_tasks; t0 += HX_POOL_MAX_TASKS) {
            part_job pj = { fn, ctx, t0 };
            hx_pool_run(p, n_tasks - t0 < HX_POOL_MAX_TASKS ? n_tasks - t0 : HX_POOL_MAX_TASKS, part_task, &pj);
        }
        return;
    }
    /* every task of the last job is done: no claim of it can succeed any more */
    const int n = (int)n_tasks;
    const unsigned job = (unsigned)atomic_load(&p->generation) + 1u;
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n_tasks, n, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->next, (uint64_t)job << 32 | (uint32_t)n, memory_order_release);
    atomic_store(&p->generation, (int)job);
    if (atomic_load(&p->sleepers) > 0) addr_wake(p, &p->generation);
    finish(p, work(p, 0, job));
    int d = 0;
    for (int i = 0; i < HX_POOL_SPIN && (d = atomic_load(&p->done)) != n; i++) cpu_relax();
    if (d != n) {
        atomic_store(&p->caller_sleeps, 1);
        while ((d = atomic_load(&p->done)) != n) addr_wait(p, &p->done, d);
        atomic_store(&p->caller_sleeps, 0);
    }
}
