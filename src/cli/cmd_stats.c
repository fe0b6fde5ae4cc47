/* stats [--json] MOUNTPOINT: the daemon's counters (xattr
 * user.squeezefs.stats on the mount root) with derived rates, and what
 * tiering did (tier_*: read-write mounts). stats --prometheus
 * MOUNTPOINT...: the same in Prometheus' text format (stats_prom.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char *const keys[] = {
    "logical_bytes_read", "logical_bytes_written", "backing_bytes_read",
    "backing_bytes_written", "blocks_decompressed", "bytes_decompressed",
    "blocks_compressed", "bytes_compressed", "raw_blocks_stored",
    "cache_hits", "cache_misses", "cache_bytes", "dirty_bytes",
    "pushed_blocks", "pushed_bytes", "push_skipped", "opens_from_lookup",
    "files_packed", "pack_failures", "packs_removed", "pack_entries_moved",
    "packed_bytes_read", "read_errors", "durable_marked", "durable_failures",
    "inodes", "max_fds", "fd_cached", "fd_cache_max", "fd_reopens",
    "fd_evictions", "fd_stale",
};
#define NKEYS (sizeof keys / sizeof keys[0])

static double num(const json_flat *o, const char *key)
{
    const json_field *f = json_flat_get(o, key);
    return f && f->kind == JSON_NUM ? f->num : 0;
}

/* tiering since the mount (src/jobs/tier.c) */
static const char *const tier_keys[] = {
    "tier_files", "tier_bytes_before", "tier_bytes_after", "tier_logical_bytes",
    "tier_skipped", "tier_abandoned", "tier_failed", "tier_passes",
};
#define NTIER (sizeof tier_keys / sizeof tier_keys[0])

static void print_tier(const json_flat *o)
{
    const json_field *iv = json_flat_get(o, "tier_interval");
    if (!iv || iv->kind != JSON_NUM)
        return; /* a read-only mount: no tiering */
    double rate = num(o, "tier_rate");
    if (iv->num > 0)
        printf("%-22s every %.0f s, %s%.0f MiB/s\n", "tier", iv->num,
               rate > 0 ? "" : "unlimited ", rate > 0 ? rate / 1048576.0 : 0.0);
    else
        printf("%-22s off (squeezefs tier runs passes)\n", "tier");
    for (size_t i = 0; i < NTIER; i++) {
        const json_field *f = json_flat_get(o, tier_keys[i]);
        printf("%-22s %s\n", tier_keys[i], f && f->kind == JSON_NUM ? f->str : "?");
    }
    double last = num(o, "tier_last_pass");
    if (last > 0) {
        time_t t = (time_t)last;
        struct tm tm;
        char when[64];
        gmtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        printf("%-22s %s (%.1f s)\n", "tier_last_pass", when,
               num(o, "tier_last_pass_seconds"));
    } else {
        printf("%-22s -\n", "tier_last_pass");
    }
    printf("%-22s %s\n", "tier_running", num(o, "tier_running") > 0 ? "yes" : "no");
}


int cmd_stats(int argc, char **argv)
{
    bool json = false, prom = false;
    const char *path = NULL;
    int nmnt = 0, bad = 0;
    char **mnts = calloc((size_t)argc, sizeof(*mnts));
    if (!mnts)
        return CLI_FAIL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--prometheus"))
            prom = true;
        else if (argv[i][0] == '-')
            bad = 1;
        else
            mnts[nmnt++] = argv[i];
    }
    if (!bad && prom && !json && nmnt >= 1) {
        int rc = stats_prometheus(nmnt, mnts);
        free(mnts);
        return rc;
    }
    if (!bad && !prom && nmnt == 1)
        path = mnts[0];
    free(mnts);
    if (!path) {
        fprintf(stderr, "usage: squeezefs stats [--json] MOUNTPOINT\n"
                        "       squeezefs stats --prometheus MOUNTPOINT...\n");
        return CLI_USAGE;
    }
    char *text;
    int r = cli_get_xattr(path, SQZ_XATTR_STATS, &text);
    if (r < 0) {
        if (r == -ENODATA || r == -ENOTSUP || r == -EOPNOTSUPP)
            cli_err("%s: not a squeezefs mount (no %s)", path, SQZ_XATTR_STATS);
        else
            cli_err("%s: %s", path, strerror(-r));
        return CLI_FAIL;
    }
    json_flat o;
    char err[128];
    r = json_flat_parse(text, &o, err, sizeof err);
    if (r < 0) {
        cli_err("%s: %s: %s", path, SQZ_XATTR_STATS, err);
        free(text);
        return CLI_FAIL;
    }
    if (json) {
        fputs(text, stdout);
        if (text[0] && text[strlen(text) - 1] != '\n')
            fputc('\n', stdout);
    } else {
        for (size_t i = 0; i < NKEYS; i++) {
            const json_field *f = json_flat_get(&o, keys[i]);
            printf("%-22s %s\n", keys[i], f && f->kind == JSON_NUM ? f->str : "?");
        }
        double hits = num(&o, "cache_hits"), misses = num(&o, "cache_misses");
        if (hits + misses > 0)
            printf("%-22s %.1f%%\n", "cache_hit_rate", 100.0 * hits / (hits + misses));
        else
            printf("%-22s -\n", "cache_hit_rate");
        double lw = num(&o, "logical_bytes_written"), bw = num(&o, "backing_bytes_written");
        double bd = num(&o, "bytes_decompressed");
        double bbr = num(&o, "backing_bytes_read");
        if (bw > 0)
            printf("%-22s %.3f\n", "write_ratio", lw / bw);
        if (bbr > 0 && bd > 0)
            printf("%-22s %.3f\n", "read_ratio", bd / bbr);
        print_tier(&o);
    }
    json_flat_free(&o);
    free(text);
    return CLI_OK;
}
