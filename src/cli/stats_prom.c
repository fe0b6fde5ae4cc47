/* squeezefs stats --prometheus MOUNTPOINT...: the daemon's counters in the
 * Prometheus text exposition format (version 0.0.4), for node_exporter's
 * textfile collector or any scraper that reads a file or a command.
 *
 * Every metric is named squeezefs_KEY (counters squeezefs_KEY_total) after
 * a key of the user.squeezefs.stats xattr, with a mountpoint label; HELP
 * and TYPE are given once per metric, the samples of all mounts follow.
 * squeezefs_up is 1 for a mount whose counters were read, else 0 (and the
 * command exits 1 after printing the others). A key the daemon reports
 * that the table below does not know is printed as untyped, so a newer
 * daemon's counters are not lost. docs/squeezefs.8 "stats" and
 * docs/GUIDE.md "Monitoring" document the names: a contract. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum mtype { M_COUNTER, M_GAUGE };

struct metric {
    const char *key;
    enum mtype type;
    const char *help;
};

static const struct metric metrics[] = {
    {"logical_bytes_read", M_COUNTER, "Bytes read through the mount (uncompressed)."},
    {"logical_bytes_written", M_COUNTER, "Bytes written through the mount (uncompressed)."},
    {"backing_bytes_read", M_COUNTER, "Bytes read from BACKING (compressed)."},
    {"backing_bytes_written", M_COUNTER, "Bytes written to BACKING (compressed)."},
    {"blocks_decompressed", M_COUNTER, "Blocks decompressed."},
    {"bytes_decompressed", M_COUNTER, "Bytes produced by decompression."},
    {"blocks_compressed", M_COUNTER, "Blocks compressed."},
    {"bytes_compressed", M_COUNTER, "Bytes given to compression."},
    {"raw_blocks_stored", M_COUNTER, "Blocks stored uncompressed (compression did not pay)."},
    {"draft_blocks", M_COUNTER, "Blocks of small closed files stored as drafts for packing."},
    {"cache_hits", M_COUNTER, "Block cache hits."},
    {"cache_misses", M_COUNTER, "Block cache misses."},
    {"cache_bytes", M_GAUGE, "Bytes held by the block cache."},
    {"dirty_bytes", M_GAUGE, "Written bytes not yet compressed and committed to BACKING."},
    {"pushed_blocks", M_COUNTER, "Decompressed blocks pushed into the kernel's page cache."},
    {"pushed_bytes", M_COUNTER, "Bytes pushed into the kernel's page cache."},
    {"push_skipped", M_COUNTER, "Pushes refused because the file changed meanwhile."},
    {"opens_from_lookup", M_COUNTER, "Opens that reused the container a lookup had opened."},
    {"files_packed", M_COUNTER, "Small closed files packed."},
    {"pack_failures", M_COUNTER, "Packing attempts that failed (the file stays a container)."},
    {"packs_removed", M_COUNTER, "Pack files reclaimed."},
    {"pack_entries_moved", M_COUNTER, "Live entries moved out of packs being reclaimed."},
    {"packed_bytes_read", M_COUNTER, "Bytes of packed files read."},
    {"pack_pending", M_GAUGE, "Closed small files waiting to be packed."},
    {"read_errors", M_COUNTER, "Reads answered with EIO: damaged data (squeezefs verify BACKING)."},
    {"durable_queued", M_GAUGE, "Closed files waiting for their durable mark."},
    {"durable_marked", M_COUNTER, "Closed files made durable in batches."},
    {"durable_batches", M_COUNTER, "Batches of durable marks (one syncfs each)."},
    {"durable_failures", M_COUNTER, "Durable-mark batches that failed (the next fsync reports it)."},
    {"security_xattr_gets", M_COUNTER, "GETXATTR requests of non-user names (security.capability)."},
    {"inodes", M_GAUGE, "Inodes the daemon knows (the kernel's, and those its queues hold)."},
    {"max_fds", M_GAUGE, "Bound of the descriptors the daemon holds on its own (max_fds=)."},
    {"fd_handles", M_GAUGE, "1 if inodes are opened again by file handle, 0 by name."},
    {"fd_cached", M_GAUGE, "Inode descriptors open in the daemon's cache."},
    {"fd_cache_max", M_GAUGE, "The inode descriptor cache's share of max_fds."},
    {"fd_reopens", M_COUNTER, "Inode descriptors opened again after their eviction."},
    {"fd_evictions", M_COUNTER, "Inode descriptors closed past the cache's bound."},
    {"fd_stale", M_COUNTER, "Inodes found gone, or their number given to another file."},
    {"killpriv_v2", M_GAUGE, "1 if the kernel accepted FUSE_HANDLE_KILLPRIV_V2."},
    {"writeback_cache", M_GAUGE, "1 if the mount uses the kernel's writeback cache."},
    {"tier_interval", M_GAUGE, "Seconds between tiering passes (0: passes run by squeezefs tier)."},
    {"tier_rate", M_GAUGE, "Tiering rate limit in bytes per second (0: unlimited)."},
    {"tier_files", M_COUNTER, "Files rewritten by tiering."},
    {"tier_bytes_before", M_COUNTER, "Stored bytes of tiered files before their rewrite."},
    {"tier_bytes_after", M_COUNTER, "Stored bytes of tiered files after their rewrite."},
    {"tier_logical_bytes", M_COUNTER, "Uncompressed bytes of tiered files."},
    {"tier_skipped", M_COUNTER, "Files tiering skipped (open for writing, hard links, damage)."},
    {"tier_abandoned", M_COUNTER, "Tiering rewrites abandoned (written meanwhile, or stopping)."},
    {"tier_failed", M_COUNTER, "Tiering rewrites that failed."},
    {"tier_passes", M_COUNTER, "Tiering passes completed."},
    {"tier_running", M_GAUGE, "1 while a tiering pass runs."},
    {"tier_last_pass", M_GAUGE, "Unix time the last tiering pass ended (0: none yet)."},
    {"tier_last_pass_seconds", M_GAUGE, "Duration of the last tiering pass in seconds."},
};
#define NMETRICS (sizeof metrics / sizeof metrics[0])

static const char *stats_prom_help(const char *key)
{
    for (size_t i = 0; i < NMETRICS; i++)
        if (!strcmp(metrics[i].key, key))
            return metrics[i].help;
    return NULL;
}

/* A label value with \, " and newline escaped. */
static void put_label(const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            printf("\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", stdout);
        else
            putchar(*s);
    }
}

static void sample(const char *name, const char *suffix, const char *mnt,
                   const char *value)
{
    printf("squeezefs_%s%s{mountpoint=\"", name, suffix);
    put_label(mnt);
    printf("\"} %s\n", value);
}

/* A metric name has [a-zA-Z0-9_:] only: a key with anything else (none
 * today) is left out rather than printed as a line scrapers reject. */
static int name_ok(const char *k)
{
    if (!*k)
        return 0;
    for (; *k; k++)
        if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
              (*k >= '0' && *k <= '9') || *k == '_'))
            return 0;
    return 1;
}

static int known(const char *key)
{
    return stats_prom_help(key) != NULL;
}

int stats_prometheus(int nmnt, char **mnts)
{
    json_flat *o = calloc((size_t)nmnt, sizeof(*o));
    char **label = calloc((size_t)nmnt, sizeof(*label));
    int *up = calloc((size_t)nmnt, sizeof(*up));
    if (!o || !label || !up) {
        free(o);
        free(label);
        free(up);
        cli_err("out of memory");
        return CLI_FAIL;
    }
    int rc = CLI_OK;
    for (int m = 0; m < nmnt; m++) {
        char real[PATH_MAX];
        label[m] = strdup(realpath(mnts[m], real) ? real : mnts[m]);
        char *text = NULL;
        int r = cli_get_xattr(mnts[m], SQZ_XATTR_STATS, &text);
        char err[128];
        if (r < 0) {
            cli_err("%s: %s", mnts[m],
                    r == -ENODATA || r == -ENOTSUP ? "not a squeezefs mount"
                                                   : strerror(-r));
            rc = CLI_FAIL;
        } else if (json_flat_parse(text, &o[m], err, sizeof err) < 0) {
            cli_err("%s: %s: %s", mnts[m], SQZ_XATTR_STATS, err);
            rc = CLI_FAIL;
        } else {
            up[m] = 1;
        }
        free(text);
    }
    printf("# HELP squeezefs_up 1 if the mount's counters were read.\n"
           "# TYPE squeezefs_up gauge\n");
    for (int m = 0; m < nmnt; m++)
        sample("up", "", label[m] ? label[m] : mnts[m], up[m] ? "1" : "0");
    for (size_t i = 0; i < NMETRICS; i++) {
        const struct metric *mt = &metrics[i];
        int head = 0;
        for (int m = 0; m < nmnt; m++) {
            const json_field *f = up[m] ? json_flat_get(&o[m], mt->key) : NULL;
            if (!f || f->kind != JSON_NUM)
                continue;
            if (!head) {
                printf("# HELP squeezefs_%s%s %s\n# TYPE squeezefs_%s%s %s\n",
                       mt->key, mt->type == M_COUNTER ? "_total" : "", mt->help,
                       mt->key, mt->type == M_COUNTER ? "_total" : "",
                       mt->type == M_COUNTER ? "counter" : "gauge");
                head = 1;
            }
            sample(mt->key, mt->type == M_COUNTER ? "_total" : "",
                   label[m] ? label[m] : mnts[m], f->str);
        }
    }
    /* keys this table does not know (a newer daemon): untyped */
    for (int m = 0; m < nmnt; m++) {
        for (size_t j = 0; up[m] && j < o[m].n; j++) {
            const json_field *f = &o[m].fields[j];
            if (f->kind != JSON_NUM || known(f->key) || !name_ok(f->key))
                continue;
            int first = 1; /* HELP/TYPE once: only at the first mount having it */
            for (int p = 0; p < m && first; p++) {
                const json_field *g = up[p] ? json_flat_get(&o[p], f->key) : NULL;
                if (g && g->kind == JSON_NUM)
                    first = 0;
            }
            if (!first)
                continue;
            printf("# HELP squeezefs_%s see squeezefs(8), stats.\n"
                   "# TYPE squeezefs_%s untyped\n", f->key, f->key);
            for (int q = m; q < nmnt; q++) {
                const json_field *g = up[q] ? json_flat_get(&o[q], f->key) : NULL;
                if (g && g->kind == JSON_NUM)
                    sample(f->key, "", label[q] ? label[q] : mnts[q], g->str);
            }
        }
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_err("writing the metrics: %s", strerror(errno));
        rc = CLI_FAIL;
    }
    for (int m = 0; m < nmnt; m++) {
        if (up[m])
            json_flat_free(&o[m]);
        free(label[m]);
    }
    free(o);
    free(label);
    free(up);
    return rc;
}
