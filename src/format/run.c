/* Runs of consecutive blocks read with few backing reads
 * (include/squeezefs/container.h, sqz_ctr_run_read): the entries of the
 * run are taken and their stored bytes read under the container's lock
 * (shared), as a single block's read does; checking and decompressing
 * each block (sqz_ctr_run_block) needs no lock. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format/format_int.h"
#include "common/lockorder.h"


/* Order of the run's entries by stored offset (insertion sort: a run has
 * at most a few hundred blocks, mostly in order already). */
static void sort_by_off(const struct sqz_run_ent *ent, size_t *ord, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        size_t v = ord[i], j = i;
        while (j > 0 && ent[ord[j - 1]].off > ent[v].off) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = v;
    }
}

/* Read the cluster [lo, hi) of stored bytes into dst: 0 or -EIO. */
static int read_cluster(sqz_ctr *c, unsigned char *dst, uint64_t lo,
                        uint64_t hi)
{
    ssize_t got = c->io.pread(c->io.ctx, c->fd, dst, (size_t)(hi - lo), lo);
    return got == (ssize_t)(hi - lo) ? 0 : -EIO;
}

int sqz_ctr_run_read(sqz_ctr *c, uint64_t idx, size_t nmax, size_t max_bytes,
                     sqz_ctr_run *run)
{
    memset(run, 0, sizeof *run);
    if (nmax == 0)
        return -EINVAL;
    SQZ_RDLOCK(&c->lock, SQZ_RANK_CTR);
    uint64_t len = c->st.length;
    uint64_t nb = (len + c->bs - 1) >> c->hdr.params.log2bs;
    if (idx >= nb) {
        SQZ_RWUNLOCK(&c->lock);
        return -ENXIO;
    }
    if (nmax > nb - idx)
        nmax = (size_t)(nb - idx);
    run->ent = malloc(nmax * sizeof *run->ent);
    size_t *ord = malloc(nmax * sizeof *ord);
    int rc = run->ent && ord ? 0 : -ENOMEM;
    /* The blocks, up to max_bytes of stored bytes (the first always). */
    size_t n = 0, nstored = 0;
    uint64_t sum = 0;
    for (; rc == 0 && n < nmax; n++) {
        const sqz_entry *e = sqz_index_get(&c->st.ix, idx + n);
        struct sqz_run_ent *r = &run->ent[n];
        memset(r, 0, sizeof *r);
        if (!e || e->off == 0)
            continue; /* a hole: no bytes */
        if (sum > 0 && sum + e->len > max_bytes)
            break;
        sum += e->len;
        r->off = e->off + SQZ_DATA_SKIP;
        r->len = e->len;
        r->crc = e->crc;
        r->kind = e->kind;
        ord[nstored++] = n;
    }
    /* Their stored bytes in offset order, in clusters of extents at most
     * SQZ_RUN_GAP apart (record headers, commit records, other blocks
     * between them): one backing read per cluster, into one buffer. */
    size_t buflen = 0;
    if (rc == 0 && nstored > 0) {
        sort_by_off(run->ent, ord, nstored);
        uint64_t clo = run->ent[ord[0]].off, chi = clo;
        for (size_t k = 0; k < nstored; k++) {
            const struct sqz_run_ent *r = &run->ent[ord[k]];
            if (r->off > chi + SQZ_RUN_GAP) {
                buflen += (size_t)(chi - clo);
                clo = r->off;
            }
            if (r->off + r->len > chi)
                chi = r->off + r->len;
        }
        buflen += (size_t)(chi - clo);
        run->buf = malloc(buflen ? buflen : 1);
        if (!run->buf)
            rc = -ENOMEM;
    }
    if (rc == 0 && nstored > 0) {
        size_t at = 0, first = 0; /* the cluster's first entry in ord */
        uint64_t clo = run->ent[ord[0]].off, chi = clo;
        for (size_t k = 0; k <= nstored; k++) {
            const struct sqz_run_ent *r = k < nstored ? &run->ent[ord[k]] : NULL;
            if (!r || r->off > chi + SQZ_RUN_GAP) {
                int bad = read_cluster(c, run->buf + at, clo, chi) < 0;
                for (size_t j = first; j < k; j++) {
                    struct sqz_run_ent *q = &run->ent[ord[j]];
                    q->boff = at + (size_t)(q->off - clo);
                    q->unread = (uint8_t)bad;
                }
                at += (size_t)(chi - clo);
                if (!r)
                    break;
                first = k;
                clo = chi = r->off;
            }
            if (r->off + r->len > chi)
                chi = r->off + r->len;
        }
        run->len = buflen;
    }
    SQZ_RWUNLOCK(&c->lock);
    free(ord);
    if (rc < 0) {
        sqz_ctr_run_free(run);
        return rc;
    }
    run->idx = idx;
    run->n = n;
    run->length = len;
    return 0;
}

ssize_t sqz_ctr_run_block(const sqz_ctr *c, const sqz_ctr_run *run, size_t i,
                          void *buf, size_t *stored_len)
{
    if (stored_len)
        *stored_len = 0;
    if (i >= run->n)
        return -EINVAL;
    const struct sqz_run_ent *r = &run->ent[i];
    if (r->unread)
        return -EAGAIN;
    uint64_t start = (run->idx + i) << c->hdr.params.log2bs;
    size_t valid = run->length - start >= c->bs ? c->bs
                                                : (size_t)(run->length - start);
    if (r->off == 0) {
        memset(buf, 0, c->bs);
        return (ssize_t)valid;
    }
    sqz_entry e = {.off = r->off - SQZ_DATA_SKIP, .len = r->len,
                   .crc = r->crc, .kind = r->kind};
    char why[64] = "";
    int rc = sqz_block_decode(c, &e, run->buf + r->boff, buf, why, sizeof why);
    if (rc < 0) {
        if (rc != -ENOMEM) {
            sqz_logf(SQZ_LOG_ERR, "%s: block %llu is damaged (%s at offset %llu)",
                     SQZ_LBL(c->label), (unsigned long long)(run->idx + i),
                     why[0] ? why : "I/O error", (unsigned long long)e.off);
            rc = -EIO;
        }
        return rc;
    }
    memset((char *)buf + valid, 0, c->bs - valid);
    if (stored_len)
        *stored_len = r->len;
    return (ssize_t)valid;
}

void sqz_ctr_run_free(sqz_ctr_run *run)
{
    free(run->buf);
    free(run->ent);
    memset(run, 0, sizeof *run);
}
