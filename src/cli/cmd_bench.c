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


/* The command line of bench. */
typedef struct bench_args {
    const char *lbs_text, *alg_text, *lvl_text, *csv, *plot_dir, *where, *goal;
    const char *gens, *dump, *tmpdir;
    bool quick;
    long runs, threads;
    uint64_t seed, size;
    char **files; /* the FILE operands (nfiles of them) */
    int nfiles;
} bench_args;

/* What one bench works on: the combinations, the inputs, the results. */
typedef struct bench_work {
    bench_combo *combos;
    size_t ncombos;
    bench_buf *inputs;
    size_t ninputs;
    bench_row *rows;
    size_t nrows;
} bench_work;

/* One option with a value (argv's opt, v) into a: CLI_OK or the exit code. */
static int parse_option(const char *opt, const char *v, bench_args *a)
{
    char *end;
    if (!strcmp(opt, "--lbs")) a->lbs_text = v;
    else if (!strcmp(opt, "--alg")) a->alg_text = v;
    else if (!strcmp(opt, "--level")) a->lvl_text = v;
    else if (!strcmp(opt, "--csv")) a->csv = v;
    else if (!strcmp(opt, "--plot")) a->plot_dir = v;
    else if (!strcmp(opt, "--where")) a->where = v;
    else if (!strcmp(opt, "--recommend")) a->goal = v;
    else if (!strcmp(opt, "--gen")) a->gens = v;
    else if (!strcmp(opt, "--dump")) a->dump = v;
    else if (!strcmp(opt, "--tmpdir")) a->tmpdir = v;
    else if (!strcmp(opt, "--runs") || !strcmp(opt, "--threads")) {
        long x = strtol(v, &end, 10);
        if (*end || x < 1 || x > 1000) {
            cli_err("%s wants a number 1..1000, not '%s'", opt, v);
            return CLI_USAGE;
        }
        *(opt[2] == 'r' ? &a->runs : &a->threads) = x;
    } else if (!strcmp(opt, "--seed")) {
        a->seed = strtoull(v, &end, 10);
        if (*end || end == v) {
            cli_err("--seed wants a number, not '%s'", v);
            return CLI_USAGE;
        }
    } else if (!strcmp(opt, "--size")) {
        if (cli_parse_size(v, &a->size) < 0 || a->size > (4ULL << 30)) {
            cli_err("--size wants a size such as 64K or 8M (up to 4G), not '%s'", v);
            return CLI_USAGE;
        }
    } else {
        cli_err("unknown option '%s'", opt);
        return usage();
    }
    return CLI_OK;
}

/* argv into a (a->files has room for argc operands): CLI_OK or the exit
 * code. */
static int parse_args(int argc, char **argv, bench_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(opt, "--quick")) {
            a->quick = true;
            continue;
        }
        if (opt[0] != '-' || !opt[1]) {
            a->files[a->nfiles++] = argv[i];
            continue;
        }
        if (!v) {
            cli_err("%s needs a value", opt);
            return CLI_USAGE;
        }
        i++;
        int rc = parse_option(opt, v, a);
        if (rc != CLI_OK)
            return rc;
    }
    return CLI_OK;
}

/* The options that must agree, checked before spending minutes measuring:
 * CLI_OK or the exit code. */
static int check_args(const bench_args *a)
{
    if (a->goal && strcmp(a->goal, "ratio") && strcmp(a->goal, "write") &&
        strcmp(a->goal, "read") && strcmp(a->goal, "balanced")) {
        cli_err("--recommend wants ratio, write, read or balanced, not '%s'", a->goal);
        return CLI_USAGE;
    }
    if (a->where) {
        char err[160];
        size_t zero = 0;
        if (bench_where(a->where, NULL, &zero, err, sizeof err) < 0) {
            cli_err("%s", err);
            return CLI_USAGE;
        }
    }
    if (a->dump && (!a->gens || strchr(a->gens, ',') || a->nfiles)) {
        cli_err("--dump FILE wants exactly one --gen GENERATOR");
        return CLI_USAGE;
    }
    if (!a->gens && a->nfiles == 0)
        return usage();
    return CLI_OK;
}

/* The algorithms of --alg (all when not given), each once: CLI_OK or the
 * exit code. */
static int parse_algs(const char *alg_text, sqz_alg *algs, int *nalgs)
{
    *nalgs = 0;
    if (!alg_text) {
        for (int k = 0; k < SQZ_ALG_COUNT; k++)
            algs[(*nalgs)++] = sqz_all_algs[k];
        return CLI_OK;
    }
    char *copy = strdup(alg_text), *save = NULL;
    if (!copy)
        return CLI_FAIL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        sqz_alg a;
        char err[160];
        if (sqz_alg_from_name(t, &a, err, sizeof err) < 0) {
            cli_err("--alg: %s", err);
            free(copy);
            return CLI_USAGE;
        }
        bool dup = false;
        for (int k = 0; k < *nalgs; k++)
            dup |= algs[k] == a;
        if (!dup && *nalgs < SQZ_ALG_COUNT)
            algs[(*nalgs)++] = a;
    }
    free(copy);
    return CLI_OK;
}

/* What to measure: every block size, algorithm and level into w->combos.
 * CLI_OK or the exit code. */
static int plan_combos(const bench_args *a, bench_work *w)
{
    int_list lbs, lvls;
    bool have_lvls = a->lvl_text != NULL;
    if (a->lbs_text) {
        if (parse_ints(a->lbs_text, SQZ_LOG2BS_MIN, SQZ_LOG2BS_MAX, &lbs, "--lbs") < 0)
            return CLI_USAGE;
    } else if (a->quick) {
        lbs = (int_list){.v = {12, 16, 17, 20}, .n = 4};
    } else {
        parse_ints("12..20", SQZ_LOG2BS_MIN, SQZ_LOG2BS_MAX, &lbs, "--lbs");
    }
    if (have_lvls && parse_ints(a->lvl_text, -100, 100, &lvls, "--level") < 0)
        return CLI_USAGE;
    sqz_alg algs[SQZ_ALG_COUNT];
    int nalgs;
    int rc = parse_algs(a->alg_text, algs, &nalgs);
    if (rc != CLI_OK)
        return rc;
    w->combos = calloc((size_t)lbs.n * (size_t)nalgs * 64, sizeof *w->combos);
    if (!w->combos)
        return CLI_FAIL;
    for (int k = 0; k < nalgs; k++) {
        int_list l;
        levels_for(algs[k], have_lvls ? &lvls : NULL, a->quick, &l);
        if (l.n == 0)
            cli_err("warning: no level of --level %s is valid for %s (%d..%d): skipped",
                    a->lvl_text, sqz_alg_name(algs[k]), sqz_level_min(algs[k]),
                    sqz_level_max(algs[k]));
    }
    for (int b = 0; b < lbs.n; b++)
        for (int k = 0; k < nalgs; k++) {
            int_list l;
            levels_for(algs[k], have_lvls ? &lvls : NULL, a->quick, &l);
            for (int j = 0; j < l.n; j++)
                w->combos[w->ncombos++] = (bench_combo){.lbs = lbs.v[b], .alg = algs[k],
                                                        .lvl = l.v[j]};
        }
    return CLI_OK;
}

/* The inputs: the FILE operands, then the generated data of --gen. CLI_OK
 * or the exit code; w->inputs holds what was loaded either way. */
static int load_inputs(const bench_args *a, bench_work *w)
{
    size_t cap = (size_t)a->nfiles + 16;
    w->inputs = calloc(cap, sizeof *w->inputs);
    if (!w->inputs)
        return CLI_FAIL;
    for (int f = 0; f < a->nfiles; f++) {
        int r = read_input(a->files[f], &w->inputs[w->ninputs]);
        if (r < 0) {
            cli_err("%s: %s", a->files[f], strerror(-r));
            return CLI_FAIL;
        }
        w->ninputs++;
    }
    if (!a->gens)
        return CLI_OK;
    char *copy = strdup(a->gens), *save = NULL;
    if (!copy)
        return CLI_FAIL;
    int rc = CLI_OK;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (w->ninputs == cap) {
            cli_err("too many generators");
            rc = CLI_FAIL;
            break;
        }
        char err[200];
        int r = bench_gen(t, a->size, a->seed, &w->inputs[w->ninputs], err, sizeof err);
        if (r < 0) {
            cli_err("%s", r == -EINVAL ? err : strerror(-r));
            rc = r == -EINVAL ? CLI_USAGE : CLI_FAIL;
            break;
        }
        w->ninputs++;
    }
    free(copy);
    return rc;
}

/* Measure every combination on every input, with a progress line. */
static int measure(const bench_args *a, bench_work *w)
{
    bench_opts o = {.runs = (int)a->runs, .threads = (int)a->threads,
                    .tmpdir = a->tmpdir && *a->tmpdir ? a->tmpdir : "/tmp"};
    cli_progress pg;
    uint64_t total = 0;
    for (size_t i = 0; i < w->ninputs; i++)
        total += (uint64_t)w->inputs[i].len * w->ncombos * (uint64_t)a->runs;
    progress_init(&pg, "bench", total);
    for (size_t i = 0; i < w->ninputs; i++)
        if (bench_sweep(&w->inputs[i], w->combos, w->ncombos, &o, &pg, &w->rows,
                        &w->nrows) < 0) {
            progress_finish(&pg);
            return CLI_FAIL;
        }
    progress_finish(&pg);
    return CLI_OK;
}

/* The results: the CSV (--csv, or bench.csv in the --plot directory), the
 * table of the rows --where keeps, the --recommend line, the charts. */
static int report(const bench_args *a, bench_work *w)
{
    char csv_tmp[PATH_MAX] = "";
    if (a->csv) {
        int r = bench_write_csv(a->csv, w->rows, w->nrows);
        if (r < 0) {
            cli_err("%s: %s", a->csv, strerror(-r));
            return CLI_FAIL;
        }
    } else if (a->plot_dir) {
        if (mkdir(a->plot_dir, 0755) < 0 && errno != EEXIST) {
            cli_err("%s: %s", a->plot_dir, strerror(errno));
            return CLI_FAIL;
        }
        snprintf(csv_tmp, sizeof csv_tmp, "%s/bench.csv", a->plot_dir);
        int r = bench_write_csv(csv_tmp, w->rows, w->nrows);
        if (r < 0) {
            cli_err("%s: %s", csv_tmp, strerror(-r));
            return CLI_FAIL;
        }
    }
    if (a->where) {
        char err[160];
        if (bench_where(a->where, w->rows, &w->nrows, err, sizeof err) < 0) {
            cli_err("%s", err);
            return CLI_FAIL;
        }
    }
    bench_print_table(stdout, w->rows, w->nrows);
    int rc = CLI_OK;
    if (a->goal) {
        printf("\n");
        if (bench_recommend(stdout, a->goal, w->rows, w->nrows) < 0)
            rc = CLI_FAIL;
    }
    if (a->plot_dir && rc == CLI_OK)
        rc = plot(a->csv ? a->csv : csv_tmp, a->plot_dir);
    return rc;
}

/* Plan, load the inputs (or write the one --dump asks for), measure and
 * report: the exit code. */
static int bench_run(const bench_args *a, bench_work *w)
{
    int rc = plan_combos(a, w);
    if (rc == CLI_OK)
        rc = load_inputs(a, w);
    if (rc != CLI_OK)
        return rc;
    if (a->dump) {
        int r = write_file(a->dump, w->inputs[0].data, w->inputs[0].len);
        if (r < 0)
            cli_err("%s: %s", a->dump, strerror(-r));
        return r < 0 ? CLI_FAIL : CLI_OK;
    }
    if (w->ncombos == 0) {
        cli_err("nothing to measure");
        return CLI_USAGE;
    }
    rc = measure(a, w);
    return rc == CLI_OK ? report(a, w) : rc;
}

int cmd_bench(int argc, char **argv)
{
    bench_args a = {.tmpdir = getenv("TMPDIR"), .runs = 3,
                    .threads = cli_default_threads(), .seed = 42, .size = 8 << 20};
    a.files = calloc((size_t)argc, sizeof *a.files);
    if (!a.files) {
        cli_err("out of memory");
        return CLI_FAIL;
    }
    int rc = parse_args(argc, argv, &a);
    if (rc == CLI_OK && a.gens && !strcmp(a.gens, "list"))
        bench_gen_list(stdout);
    else if (rc == CLI_OK && (rc = check_args(&a)) == CLI_OK) {
        bench_work w = {0};
        rc = bench_run(&a, &w);
        for (size_t i = 0; i < w.ninputs; i++)
            free(w.inputs[i].data);
        free(w.inputs);
        free(w.rows);
        free(w.combos);
    }
    free(a.files);
    return rc;
}
