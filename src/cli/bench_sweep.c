/* The bench measurement loop (the seed's testAll): for every combination
 * write the input through the container library into a temp file (parallel
 * prepare, commit, sync) and read it back from a fresh open, timing both;
 * the median of the runs is reported. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One write + read-back. */
static int one_run(const bench_buf *in, const sqz_params *p, const bench_opts *o,
                   unsigned char *back, double *wms, double *rms, uint64_t *stored)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/sqz-bench.XXXXXX", o->tmpdir) >= sizeof path)
        return -ENAMETOOLONG;
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0)
        return -errno;
    cli_src src;
    cli_src_mem(&src, in->data, in->len);
    double t0 = cli_now();
    sqz_ctr *c;
    int r = sqz_ctr_create_fd(fd, p, path, &c);
    if (r == 0) {
        r = cli_ctr_fill(c, &src, o->threads, NULL);
        if (r == 0)
            r = sqz_ctr_sync(c, 0);
        int rc = sqz_ctr_close(c);
        if (r == 0)
            r = rc;
    }
    double t1 = cli_now();
    struct stat st;
    if (r == 0 && stat(path, &st) < 0)
        r = -errno;
    if (r == 0) {
        double t2 = cli_now();
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            r = -errno;
        if (r == 0 && (r = sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, path, &c)) == 0) {
            if (sqz_ctr_length(c) != in->len)
                r = -EIO;
            if (r == 0)
                r = cli_ctr_read_all(c, back, o->threads);
            sqz_ctr_close(c);
        }
        double t3 = cli_now();
        *rms = (t3 - t2) * 1e3;
        if (r == 0 && in->len && memcmp(back, in->data, in->len))
            r = -EILSEQ; /* read back differs: a bug below us */
    }
    *wms = (t1 - t0) * 1e3;
    *stored = r == 0 ? (uint64_t)st.st_size : 0;
    unlink(path);
    return r;
}

int bench_sweep(const bench_buf *in, const bench_combo *combos, size_t ncombos,
                const bench_opts *o, cli_progress *pg, bench_row **rows,
                size_t *nrows)
{
    unsigned char *back = malloc(in->len ? in->len : 1);
    double *w = calloc((size_t)o->runs, sizeof *w);
    double *rd = calloc((size_t)o->runs, sizeof *rd);
    bench_row *all = realloc(*rows, (*nrows + ncombos) * sizeof **rows);
    if (!back || !w || !rd || !all) {
        free(back); free(w); free(rd);
        if (all)
            *rows = all;
        cli_err("out of memory");
        return -ENOMEM;
    }
    *rows = all;
    int r = 0;
    for (size_t i = 0; i < ncombos && r == 0; i++) {
        const bench_combo *cb = &combos[i];
        sqz_params p = {.alg = cb->alg, .level = cb->lvl, .log2bs = cb->lbs,
                        .min_saving = SQZ_MIN_SAVING_DEFAULT, .auto_mode = 0};
        char err[160];
        if (sqz_params_check(&p, err, sizeof err) < 0) {
            cli_err("%s", err);
            r = -EINVAL;
            break;
        }
        uint64_t stored = 0;
        for (int k = 0; k < o->runs && r == 0; k++) {
            r = one_run(in, &p, o, back, &w[k], &rd[k], &stored);
            progress_add(pg, in->len);
        }
        if (r < 0) {
            cli_err("bench %s lbs %d %s:%d: %s", in->name, cb->lbs, sqz_alg_name(cb->alg),
                    cb->lvl, r == -EILSEQ ? "data read back differs" : strerror(-r));
            break;
        }
        bench_row *row = &all[(*nrows)++];
        memset(row, 0, sizeof *row);
        snprintf(row->input, sizeof row->input, "%s", in->name);
        row->size = in->len;
        row->lbs = cb->lbs;
        row->alg = cb->alg;
        row->lvl = cb->lvl;
        row->comp_factor = stored ? (double)in->len / (double)stored : 0;
        row->write_ms = median(w, o->runs);
        row->read_ms = median(rd, o->runs);
        double mb = (double)in->len / 1e6;
        row->write_mbps = row->write_ms > 0 ? mb / (row->write_ms / 1e3) : 0;
        row->read_mbps = row->read_ms > 0 ? mb / (row->read_ms / 1e3) : 0;
    }
    free(back);
    free(w);
    free(rd);
    return r;
}
