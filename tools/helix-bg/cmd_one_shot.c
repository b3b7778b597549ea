/* cmd_one_shot.c — helix-bg one-shot [KB-DIR]: read, embed what is new, analyze,
 * write embeddings.bin + insights.json next to data.log, print the summary. */
#include "cli.h"
#include "kb_cli.h"

#include <sys/stat.h>

int cmd_one_shot(int argc, char **argv) {
    kb_cli c;
    int rc = kb_cli_parse(&c, argc, argv, "one-shot", false);
    if (rc) return rc < 0 ? 0 : rc;
    char p[4096];
    snprintf(p, sizeof p, "%s/data.log", c.dir);
    struct stat sb;
    if (stat(c.dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "helix-bg one-shot: '%s' is not a directory (a knowledge base is a directory holding data.log)\n", c.dir);
        return 1;
    }
    if (stat(p, &sb) != 0) { fprintf(stderr, "helix-bg one-shot: %s: no such file: not a knowledge base\n", p); return 1; }
    /* the same lock as the daemon: a one-shot pass must not write the cache and
     * report under a running daemon (or another one-shot); it refuses at once */
    hx_error e = {0};
    int lock;
    if (kb_lock(c.dir, &lock, &e) != HX_OK) {
        fprintf(stderr, "helix-bg one-shot: %s; not writing the KB now (stop the daemon, or send it SIGHUP for a pass)\n",
                e.msg);
        return 1;
    }
    kb_embedder *em = kb_cli_embedder(&c, "one-shot");
    if (!em) { kb_unlock(lock); return 1; }
    kb_opts o = kb_cli_opts(&c, em);
    bool llm_failed;
    kb_llm *llm = kb_cli_llm(&c, "one-shot", &llm_failed);
    if (llm_failed) { em->free(em); kb_unlock(lock); return 1; }
    hx_pool *pool = hx_pool_create(c.threads);
    kb_pass_stats st = {0};
    rc = 0;
    /* the summary comes after the think stage (it leads with misfiled entries)
     * unless there is none */
    if (kb_run_pass(c.dir, em, pool, &o, !c.quiet && c.no_think, true, NULL, &st, &e) != HX_OK) {
        fprintf(stderr, "helix-bg one-shot: %s\n", e.msg);
        rc = 1;
    } else if (!c.quiet) {
        printf("\n%zu entries (%zu deleted, %zu malformed lines skipped), %zu embedded now with %s, %.2f s "
               "(embedding %.2f s, %s %.2f s); wrote %s/insights.json\n",
               st.live, st.entries - st.live, st.malformed, st.embedded, em->name, st.seconds, st.embed_seconds,
               st.incremental ? "incremental pairs" : "all-pairs", st.analyze_seconds, c.dir);
    }
    if (rc == 0 && !c.no_think) {
        kb_think_opts to = kb_cli_think_opts(&c, llm);
        kb_think_stats ts;
        if (kb_think(c.dir, em, pool, &to, !c.quiet, &ts, &e) != HX_OK) {
            fprintf(stderr, "helix-bg one-shot: %s\n", e.msg);
            rc = 1;
        } else if (!c.quiet) {
            printf("\n%zu entries classified (%s), %zu likely misfiled, %zu patterns", ts.classified,
                   llm ? "LLM" : "nearest topic centroid", ts.misfiled, ts.patterns);
            if (llm)
                printf(", %zu summaries, %zu digests, %zu merge suggestions (%zu prompts run on %s, the rest cached)",
                       ts.summaries, ts.digests, ts.merges, ts.llm_asked, kb_llm_device(llm));
            printf(", %.2f s\n", ts.seconds);
        }
    }
    kb_llm_free(llm);
    hx_pool_free(pool);
    em->free(em);
    kb_unlock(lock);
    return rc;
}
