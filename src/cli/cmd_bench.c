/* bench: measure compFactor / writeTime / readTime over block sizes,
 * algorithms and levels (the seed's testAll) on files or generated data. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#ifndef SQZ_SOURCE_ROOT
#define SQZ_SOURCE_ROOT ""
#endif

typedef struct int_list {
    int v[64];
    int n;
} int_list;

/* "A..B", "A,B,C" or "A" into l (values in lo..hi). */
static int parse_ints(const char *text, int lo, int hi, int_list *l, const char *what)
{
    l->n = 0;
    const char *dots = strstr(text, "..");
    char *end;
    if (dots) {
        long a = strtol(text, &end, 10);
        if (end != dots)
            goto bad;
        long b = strtol(dots + 2, &end, 10);
        if (*end || end == dots + 2 || a > b)
            goto bad;
        for (long x = a; x <= b; x++) {
            if (x < lo || x > hi || l->n >= 64)
                goto range;
            l->v[l->n++] = (int)x;
        }
        return 0;
    }
    for (const char *p = text;;) {
        long x = strtol(p, &end, 10);
        if (end == p || (*end && *end != ','))
            goto bad;
        if (x < lo || x > hi || l->n >= 64)
            goto range;
        l->v[l->n++] = (int)x;
        if (!*end)
            return 0;
        p = end + 1;
    }
bad:
    cli_err("%s: expected a list (1,2,3) or a range (1..9), not '%s'", what, text);
    return -EINVAL;
range:
    cli_err("%s '%s': values must be in %d..%d", what, text, lo, hi);
    return -EINVAL;
}

/* The levels of alg to measure. */
static void levels_for(sqz_alg alg, const int_list *given, bool quick, int_list *out)
{
    out->n = 0;
    int lo = sqz_level_min(alg), hi = sqz_level_max(alg);
    if (lo == hi) {
        out->v[out->n++] = lo;
        return;
    }
    if (given) {
        for (int i = 0; i < given->n; i++)
            if (given->v[i] >= lo && given->v[i] <= hi)
                out->v[out->n++] = given->v[i];
        return;
    }
    if (quick) {
        static const int gz[] = {1, 6, 9}, hc[] = {1, 9, 12}, zs[] = {-7, 1, 3, 9, 19};
        const int *q = alg == SQZ_ALG_GZIP ? gz : alg == SQZ_ALG_LZ4HC ? hc : zs;
        int nq = alg == SQZ_ALG_ZSTD ? 5 : 3;
        for (int i = 0; i < nq; i++)
            if (q[i] >= lo && q[i] <= hi)
                out->v[out->n++] = q[i];
        if (out->n == 0)
            out->v[out->n++] = sqz_level_default(alg);
        return;
    }
    for (int x = lo; x <= hi && out->n < 64; x++)
        out->v[out->n++] = x;
}

static int read_input(const char *path, bench_buf *b)
{
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "%s", path);
    cli_src s;
    int r = cli_src_open(path, &s);
    if (r < 0)
        return r;
    b->len = (size_t)s.len;
    b->data = malloc(b->len ? b->len : 1);
    if (!b->data) {
        cli_src_close(&s);
        return -ENOMEM;
    }
    ssize_t n = cli_src_pread(&s, b->data, b->len, 0);
    cli_src_close(&s);
    if (n < 0 || (size_t)n != b->len) {
        free(b->data);
        b->data = NULL;
        return n < 0 ? (int)n : -EIO;
    }
    return 0;
}

static int write_file(const char *path, const void *buf, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const char *)buf + done, n - done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            return -e;
        }
        done += (size_t)w;
    }
    return close(fd) < 0 ? -errno : 0;
}

static bool exists(const char *p)
{
    return access(p, R_OK) == 0;
}

/* tools/bench_plot.py: $SQZ_BENCH_PLOT, the source tree the binary was
 * built from, or a tools/ directory above the binary. */
static bool find_plot_script(char *out, size_t n)
{
    const char *env = getenv("SQZ_BENCH_PLOT");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return exists(out);
    }
    if (SQZ_SOURCE_ROOT[0]) {
        if ((size_t)snprintf(out, n, "%s/tools/bench_plot.py", SQZ_SOURCE_ROOT) < n &&
            exists(out))
            return true;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return false;
    exe[len] = '\0';
    for (int up = 0; up < 5; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash)
            break;
        *slash = '\0';
        if ((size_t)snprintf(out, n, "%s/tools/bench_plot.py", exe) < n && exists(out))
            return true;
    }
    return false;
}

/* Run argv; returns its exit status (127 when it cannot be run). */
static int run_child(char *const argv[], bool quiet)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return 127;
    if (pid == 0) {
        if (quiet) {
            int devnull = open("/dev/null", O_WRONLY);
            if (devnull >= 0) {
                dup2(devnull, STDOUT_FILENO);
                dup2(devnull, STDERR_FILENO);
            }
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return 127;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int plot(const char *csv, const char *dir)
{
    char script[PATH_MAX];
    if (!find_plot_script(script, sizeof script)) {
        cli_err("--plot: tools/bench_plot.py not found (set SQZ_BENCH_PLOT)");
        return CLI_FAIL;
    }
    char *check[] = {"python3", "-c", "import matplotlib", NULL};
    int st = run_child(check, true);
    if (st == 127) {
        cli_err("--plot needs python3, which was not found");
        return CLI_FAIL;
    }
    if (st != 0) {
        cli_err("--plot needs matplotlib for python3 (pip install matplotlib, or the "
                "python3-matplotlib package)");
        return CLI_FAIL;
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        cli_err("%s: %s", dir, strerror(errno));
        return CLI_FAIL;
    }
    char *cmd[] = {"python3", script, (char *)csv, (char *)dir, NULL};
    if (run_child(cmd, false) != 0) {
        cli_err("--plot: %s failed", script);
        return CLI_FAIL;
    }
    return CLI_OK;
}

static int usage(void)
{
    fprintf(stderr,
        "usage: squeezefs bench [OPTIONS] FILE...\n"
        "       squeezefs bench [OPTIONS] --gen GENERATOR[,GENERATOR...] [--size BYTES]\n"
        "       squeezefs bench --gen GENERATOR --dump FILE [--size BYTES] [--seed N]\n"
        "       squeezefs bench --gen list\n"
        "options:\n"
        "  --lbs 12..20|LIST      log2 block sizes (default 12..20)\n"
        "  --alg LIST             algorithms (default all:\n"
        "                         %s)\n"
        "  --level LIST|RANGE     levels (default each algorithm's whole range)\n"
        "  --quick                lbs 12,16,17,20 and a few levels per algorithm\n"
        "  --runs N               runs per combination, median reported (default 3)\n"
        "  --threads N            compression/decompression threads\n"
        "  --csv FILE             write all results as CSV\n"
        "  --where EXPR           show rows matching e.g. 'writeTime<0.3 and compFactor>2'\n"
        "  --recommend GOAL       ratio|write|read|balanced: print the best SPEC\n"
        "  --plot DIR             PNG charts (python3 + matplotlib)\n"
        "  --seed N, --size BYTES generator seed and size (default 8M)\n"
        "  --tmpdir DIR           where the temporary containers go (default $TMPDIR)\n",
        sqz_alg_names());
    return CLI_USAGE;
}

int cmd_bench(int argc, char **argv)
{
    const char *lbs_text = NULL, *alg_text = NULL, *lvl_text = NULL, *csv = NULL;
    const char *plot_dir = NULL, *where = NULL, *goal = NULL, *gens = NULL, *dump = NULL;
    const char *tmpdir = getenv("TMPDIR");
    bool quick = false;
    long runs = 3, threads = cli_default_threads();
    uint64_t seed = 42, size = 8 << 20;
    char **files = calloc((size_t)argc, sizeof *files);
    int nfiles = 0;
    if (!files) {
        cli_err("out of memory");
        return CLI_FAIL;
    }
    int rc = CLI_USAGE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (!strcmp(a, "--quick")) {
            quick = true;
            continue;
        }
        if (a[0] != '-' || !a[1]) {
            files[nfiles++] = argv[i];
            continue;
        }
        if (!v) {
            cli_err("%s needs a value", a);
            goto out;
        }
        i++;
        if (!strcmp(a, "--lbs")) lbs_text = v;
        else if (!strcmp(a, "--alg")) alg_text = v;
        else if (!strcmp(a, "--level")) lvl_text = v;
        else if (!strcmp(a, "--csv")) csv = v;
        else if (!strcmp(a, "--plot")) plot_dir = v;
        else if (!strcmp(a, "--where")) where = v;
        else if (!strcmp(a, "--recommend")) goal = v;
        else if (!strcmp(a, "--gen")) gens = v;
        else if (!strcmp(a, "--dump")) dump = v;
        else if (!strcmp(a, "--tmpdir")) tmpdir = v;
        else if (!strcmp(a, "--runs") || !strcmp(a, "--threads")) {
            long x = strtol(v, &end, 10);
            if (*end || x < 1 || x > 1000) {
                cli_err("%s wants a number 1..1000, not '%s'", a, v);
                goto out;
            }
            *(a[2] == 'r' ? &runs : &threads) = x;
        } else if (!strcmp(a, "--seed")) {
            seed = strtoull(v, &end, 10);
            if (*end || end == v) {
                cli_err("--seed wants a number, not '%s'", v);
                goto out;
            }
        } else if (!strcmp(a, "--size")) {
            if (cli_parse_size(v, &size) < 0 || size > (4ULL << 30)) {
                cli_err("--size wants a size such as 64K or 8M (up to 4G), not '%s'", v);
                goto out;
            }
        } else {
            cli_err("unknown option '%s'", a);
            rc = usage();
            goto out;
        }
    }
    if (gens && !strcmp(gens, "list")) {
        bench_gen_list(stdout);
        rc = CLI_OK;
        goto out;
    }
    if (goal && strcmp(goal, "ratio") && strcmp(goal, "write") && strcmp(goal, "read") &&
        strcmp(goal, "balanced")) {
        cli_err("--recommend wants ratio, write, read or balanced, not '%s'", goal);
        goto out;
    }
    if (where) { /* check the expression before spending minutes measuring */
        char err[160];
        size_t zero = 0;
        if (bench_where(where, NULL, &zero, err, sizeof err) < 0) {
            cli_err("%s", err);
            goto out;
        }
    }
    if (dump && (!gens || strchr(gens, ',') || nfiles)) {
        cli_err("--dump FILE wants exactly one --gen GENERATOR");
        goto out;
    }
    if (!gens && nfiles == 0) {
        rc = usage();
        goto out;
    }

    /* what to measure */
    int_list lbs, lvls;
    bool have_lvls = lvl_text != NULL;
    if (lbs_text) {
        if (parse_ints(lbs_text, SQZ_LOG2BS_MIN, SQZ_LOG2BS_MAX, &lbs, "--lbs") < 0)
            goto out;
    } else if (quick) {
        lbs = (int_list){.v = {12, 16, 17, 20}, .n = 4};
    } else {
        parse_ints("12..20", SQZ_LOG2BS_MIN, SQZ_LOG2BS_MAX, &lbs, "--lbs");
    }
    if (have_lvls && parse_ints(lvl_text, -100, 100, &lvls, "--level") < 0)
        goto out;
    sqz_alg algs[SQZ_ALG_COUNT];
    int nalgs = 0;
    if (alg_text) {
        char *copy = strdup(alg_text), *save = NULL;
        if (!copy) {
            rc = CLI_FAIL;
            goto out;
        }
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            sqz_alg a;
            char err[160];
            if (sqz_alg_from_name(t, &a, err, sizeof err) < 0) {
                cli_err("--alg: %s", err);
                free(copy);
                goto out;
            }
            bool dup = false;
            for (int k = 0; k < nalgs; k++)
                dup |= algs[k] == a;
            if (!dup && nalgs < SQZ_ALG_COUNT)
                algs[nalgs++] = a;
        }
        free(copy);
    } else {
        for (int k = 0; k < SQZ_ALG_COUNT; k++)
            algs[nalgs++] = sqz_all_algs[k];
    }
    bench_combo *combos = calloc((size_t)lbs.n * (size_t)nalgs * 64, sizeof *combos);
    size_t ncombos = 0;
    if (!combos) {
        rc = CLI_FAIL;
        goto out;
    }
    for (int a = 0; a < nalgs; a++) {
        int_list l;
        levels_for(algs[a], have_lvls ? &lvls : NULL, quick, &l);
        if (l.n == 0)
            cli_err("warning: no level of --level %s is valid for %s (%d..%d): skipped",
                    lvl_text, sqz_alg_name(algs[a]), sqz_level_min(algs[a]),
                    sqz_level_max(algs[a]));
    }
    for (int b = 0; b < lbs.n; b++)
        for (int a = 0; a < nalgs; a++) {
            int_list l;
            levels_for(algs[a], have_lvls ? &lvls : NULL, quick, &l);
            for (int k = 0; k < l.n; k++)
                combos[ncombos++] = (bench_combo){.lbs = lbs.v[b], .alg = algs[a],
                                                  .lvl = l.v[k]};
        }

    /* inputs */
    size_t ninputs = 0, cap = (size_t)nfiles + 16;
    bench_buf *inputs = calloc(cap, sizeof *inputs);
    bench_row *rows = NULL;
    size_t nrows = 0;
    rc = CLI_FAIL;
    if (!inputs)
        goto out_combos;
    for (int f = 0; f < nfiles; f++) {
        int r = read_input(files[f], &inputs[ninputs]);
        if (r < 0) {
            cli_err("%s: %s", files[f], strerror(-r));
            goto out_inputs;
        }
        ninputs++;
    }
    if (gens) {
        char *copy = strdup(gens), *save = NULL;
        if (!copy)
            goto out_inputs;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (ninputs == cap) {
                cli_err("too many generators");
                free(copy);
                goto out_inputs;
            }
            char err[200];
            int r = bench_gen(t, size, seed, &inputs[ninputs], err, sizeof err);
            if (r < 0) {
                cli_err("%s", r == -EINVAL ? err : strerror(-r));
                rc = r == -EINVAL ? CLI_USAGE : CLI_FAIL;
                free(copy);
                goto out_inputs;
            }
            ninputs++;
        }
        free(copy);
    }
    if (dump) {
        int r = write_file(dump, inputs[0].data, inputs[0].len);
        if (r < 0)
            cli_err("%s: %s", dump, strerror(-r));
        rc = r < 0 ? CLI_FAIL : CLI_OK;
        goto out_inputs;
    }
    if (ncombos == 0) {
        cli_err("nothing to measure");
        rc = CLI_USAGE;
        goto out_inputs;
    }

    /* measure */
    bench_opts o = {.runs = (int)runs, .threads = (int)threads,
                    .tmpdir = tmpdir && *tmpdir ? tmpdir : "/tmp"};
    cli_progress pg;
    uint64_t total = 0;
    for (size_t i = 0; i < ninputs; i++)
        total += (uint64_t)inputs[i].len * ncombos * (uint64_t)runs;
    progress_init(&pg, "bench", total);
    for (size_t i = 0; i < ninputs; i++)
        if (bench_sweep(&inputs[i], combos, ncombos, &o, &pg, &rows, &nrows) < 0) {
            progress_finish(&pg);
            goto out_inputs;
        }
    progress_finish(&pg);

    /* report */
    char csv_tmp[PATH_MAX] = "";
    if (csv) {
        int r = bench_write_csv(csv, rows, nrows);
        if (r < 0) {
            cli_err("%s: %s", csv, strerror(-r));
            goto out_inputs;
        }
    } else if (plot_dir) {
        if (mkdir(plot_dir, 0755) < 0 && errno != EEXIST) {
            cli_err("%s: %s", plot_dir, strerror(errno));
            goto out_inputs;
        }
        snprintf(csv_tmp, sizeof csv_tmp, "%s/bench.csv", plot_dir);
        int r = bench_write_csv(csv_tmp, rows, nrows);
        if (r < 0) {
            cli_err("%s: %s", csv_tmp, strerror(-r));
            goto out_inputs;
        }
    }
    if (where) {
        char err[160];
        if (bench_where(where, rows, &nrows, err, sizeof err) < 0) {
            cli_err("%s", err);
            goto out_inputs;
        }
    }
    bench_print_table(stdout, rows, nrows);
    rc = CLI_OK;
    if (goal) {
        printf("\n");
        if (bench_recommend(stdout, goal, rows, nrows) < 0)
            rc = CLI_FAIL;
    }
    if (plot_dir && rc == CLI_OK)
        rc = plot(csv ? csv : csv_tmp, plot_dir);
out_inputs:
    for (size_t i = 0; i < ninputs; i++)
        free(inputs[i].data);
    free(inputs);
    free(rows);
out_combos:
    free(combos);
out:
    free(files);
    return rc;
}
