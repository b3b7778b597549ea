/* cmd_one_shot.c — helix-bg one-shot [KB-DIR]: read, embed what is new, analyze,
 * write embeddings.bin + insights.json next to data.log, print the summary.
 * With --mpi (under mpirun), one full pass shared by the MPI ranks (src/kb/mpi.h). */
#include "cli.h"
#include "kb_cli.h"
#ifdef HX_HAVE_MPI
#include "helix_kb.h"
#endif

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The KB-DIR checks both modes make before taking the lock. */
static bool kb_dir_ok(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s/data.log", dir);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "helix-bg one-shot: '%s' is not a directory (a knowledge base is a directory holding data.log)\n", dir);
        return false;
    }
    if (stat(p, &sb) != 0) { fprintf(stderr, "helix-bg one-shot: %s: no such file: not a knowledge base\n", p); return false; }
    return true;
}

/* The same lock as the daemon: a one-shot pass must not write the cache and
 * report under a running daemon (or another one-shot); it refuses at once. */
static bool take_lock(const char *dir, int *lock) {
    hx_error e = {0};
    if (kb_lock(dir, lock, &e) == HX_OK) return true;
    fprintf(stderr, "helix-bg one-shot: %s; not writing the KB now (stop the daemon, or send it SIGHUP for a pass)\n", e.msg);
    return false;
}

static void print_pass(const kb_cli *c, const kb_pass_stats *st, const kb_embedder *em) {
    printf("\n%zu entries (%zu deleted, %zu malformed lines skipped), %zu embedded now with %s, %.2f s "
           "(embedding %.2f s, %s %.2f s); wrote %s/insights.json\n",
           st->live, st->entries - st->live, st->malformed, st->embedded, em->name, st->seconds, st->embed_seconds,
           st->incremental ? "incremental pairs" : "all-pairs", st->analyze_seconds, c->dir);
}

/* Classification, patterns and the LLM stage after a pass; 0 or 1. */
static int think(const kb_cli *c, kb_embedder *em, hx_pool *pool, kb_llm *llm) {
    if (c->no_think) return 0;
    hx_error e = {0};
    kb_think_opts to = kb_cli_think_opts(c, llm);
    kb_think_stats ts;
    if (kb_think(c->dir, em, pool, &to, !c->quiet, &ts, &e) != HX_OK) {
        fprintf(stderr, "helix-bg one-shot: %s\n", e.msg);
        return 1;
    }
    if (!c->quiet) {
        printf("\n%zu entries classified (%s), %zu likely misfiled, %zu patterns", ts.classified,
               llm ? "LLM" : "nearest topic centroid", ts.misfiled, ts.patterns);
        if (llm)
            printf(", %zu summaries, %zu digests, %zu merge suggestions (%zu prompts run on %s, the rest cached)",
                   ts.summaries, ts.digests, ts.merges, ts.llm_asked, kb_llm_device(llm));
        printf(", %.2f s\n", ts.seconds);
    }
    return 0;
}

#ifdef HX_HAVE_MPI
/* Every rank runs this with the same arguments (mpirun). Rank 0 checks the
 * KB, holds the lock, writes the files, prints the summary and runs the think
 * stage (single-process: it is linear in the entries). */
static int one_shot_mpi(int argc, char **argv) {
    int rank, size, lrank, lsize;
    hx_error e = {0};
    if (kb_mpi_init(&rank, &size, &lrank, &lsize, &e) != HX_OK) {
        fprintf(stderr, "helix-bg one-shot --mpi: %s\n", e.msg);
        return 1;
    }
    kb_cli c;
    int rc = kb_cli_parse(&c, argc, argv, "one-shot", false);
    if (rc) { kb_mpi_finalize(); return rc < 0 ? 0 : rc; }
    int lock = -1;
    kb_embedder *em = NULL;
    kb_llm *llm = NULL;
    hx_pool *pool = NULL;
    rc = 1;
    if (!kb_mpi_root_ok(rank != 0 || (kb_dir_ok(c.dir) && take_lock(c.dir, &lock)))) goto out;
    em = kb_cli_embedder(&c, "one-shot");
    char device[16] = "cpu";
    if (em && kb_mpi_pick_gpu(em, lrank, device, &e) != HX_OK) {
        fprintf(stderr, "helix-bg one-shot --mpi: rank %d: %s\n", rank, e.msg);
        em->free(em);
        em = NULL;
    }
    if (!kb_mpi_all(em != NULL)) goto out;
    bool llm_failed = false;
    if (rank == 0) llm = kb_cli_llm(&c, "one-shot", &llm_failed);
    if (!kb_mpi_root_ok(!llm_failed)) goto out;
    /* -t 0: this host's cores shared by its ranks */
    int threads = c.threads;
    if (!threads) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads = ncpu > lsize ? (int)(ncpu / lsize) : 1;
    }
    pool = hx_pool_create(threads);
    if (!kb_mpi_all(pool != NULL)) { fprintf(stderr, "helix-bg one-shot --mpi: rank %d: out of memory\n", rank); goto out; }
    kb_opts o = kb_cli_opts(&c, em);
    kb_mpi_stats st = {0};
    /* as the single-process pass: the summary comes from the think stage unless --no-think */
    if (kb_mpi_pass(c.dir, em, pool, &o, !c.quiet && rank == 0 && c.no_think, !c.quiet, &st, &e) != HX_OK) {
        if (rank == 0 || strcmp(e.msg, KB_MPI_OTHER_RANK)) fprintf(stderr, "helix-bg one-shot --mpi: rank %d: %s\n", rank, e.msg);
        goto out;
    }
    rc = 0;
    if (rank == 0) {
        if (!c.quiet) {
            print_pass(&c, &st.pass, em);
            printf("mpi: %d ranks, %d threads each, embedding on %s (rank 0), pairs on cuda in %d of %d ranks: read %.2f s, "
                   "embed %.2f s, exchange %.2f s, pairs %.2f-%.2f s (cpu %.2f-%.2f s), merge and write %.2f s\n",
                   st.ranks, threads, device, st.pairs_gpu_ranks, st.ranks, st.read_s, st.embed_s, st.exchange_s,
                   st.pairs_min_s, st.pairs_max_s, st.pairs_cpu_min_s, st.pairs_cpu_max_s, st.finish_s);
        }
        rc = think(&c, em, pool, llm);
    }
out:
    kb_llm_free(llm);
    hx_pool_free(pool);
    if (em) em->free(em);
    kb_unlock(lock);
    kb_mpi_finalize();
    return rc;
}
#endif

int cmd_one_shot(int argc, char **argv) {
    /* --mpi is taken out here; every other option is kb_cli's */
    bool mpi = false;
    char **av = malloc(((size_t)argc + 1) * sizeof *av);
    if (!av) { fprintf(stderr, "helix-bg one-shot: out of memory\n"); return 1; }
    int ac = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--mpi")) mpi = true;
        else av[ac++] = argv[i];
    }
    av[ac] = NULL;
    if (mpi) {
#ifdef HX_HAVE_MPI
        int r = one_shot_mpi(ac, av);
        free(av);
        return r;
#else
        free(av);
        fprintf(stderr, "helix-bg one-shot: --mpi: this helix-bg was built without MPI (CMake found no MPI C library); "
                        "install Open MPI (openmpi-bin libopenmpi-dev, see scripts/deps.sh) and rebuild\n");
        return 2;
#endif
    }
    kb_cli c;
    int rc = kb_cli_parse(&c, ac, av, "one-shot", false);
    if (rc) {
        if (rc < 0)
            printf("  --mpi             one full pass shared by MPI ranks: mpirun -np R helix-bg one-shot KB --mpi\n");
        free(av);
        return rc < 0 ? 0 : rc;
    }
    free(av); /* c points into argv, not av */
    if (!kb_dir_ok(c.dir)) return 1;
    int lock;
    if (!take_lock(c.dir, &lock)) return 1;
    kb_embedder *em = kb_cli_embedder(&c, "one-shot");
    if (!em) { kb_unlock(lock); return 1; }
    kb_opts o = kb_cli_opts(&c, em);
    bool llm_failed;
    kb_llm *llm = kb_cli_llm(&c, "one-shot", &llm_failed);
    if (llm_failed) { em->free(em); kb_unlock(lock); return 1; }
    hx_pool *pool = hx_pool_create(c.threads);
    kb_pass_stats st = {0};
    hx_error e = {0};
    rc = 0;
    /* the summary comes after the think stage (it leads with misfiled entries)
     * unless there is none */
    if (kb_run_pass(c.dir, em, pool, &o, !c.quiet && c.no_think, true, NULL, &st, &e) != HX_OK) {
        fprintf(stderr, "helix-bg one-shot: %s\n", e.msg);
        rc = 1;
    } else if (!c.quiet) {
        print_pass(&c, &st, em);
    }
    if (rc == 0) rc = think(&c, em, pool, llm);
    kb_llm_free(llm);
    hx_pool_free(pool);
    em->free(em);
    kb_unlock(lock);
    return rc;
}
