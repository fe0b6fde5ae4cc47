/* Whole blocks copied from one engine file to another as they are stored
 * (copy_file_range between containers of the same coding): no
 * decompression, no compression, one commit per batch in the destination.
 * Invariants: file_int.h. */
#include "engine/file_int.h"
#include "common/lockorder.h"

#include <errno.h>

int sqz_file_stored_get(sqz_file *f, uint64_t idx, size_t n, uint64_t as_idx,
                        sqz_prepared *out)
{
    memset(out, 0, n * sizeof *out);
    SQZ_WRLOCK(&f->lock, SQZ_RANK_FILE);
    /* what was written before is in the container first */
    int rc = sqz_file_commit_locked(f, f->length, NULL);
    if (rc == 0 && ((idx + n) << f->log2bs) > f->length)
        rc = -EINVAL; /* whole blocks of the file only */
    size_t i = 0;
    for (; rc == 0 && i < n; i++)
        rc = sqz_ctr_stored_get(f->c, idx + i, as_idx + i, &out[i]);
    SQZ_RWUNLOCK(&f->lock);
    if (rc < 0)
        for (size_t j = 0; j < i; j++)
            sqz_prepared_free(&out[j]);
    return rc;
}

int sqz_file_stored_put(sqz_file *f, sqz_prepared *p, size_t n)
{
    if (n == 0)
        return 0;
    uint64_t lo = p[0].idx, hi = p[n - 1].idx + 1;
    for (size_t i = 1; i < n; i++)
        if (p[i].idx != p[i - 1].idx + 1)
            return -EINVAL;
    if ((hi << f->log2bs) > sqz_max_length((int)f->log2bs))
        return -EFBIG;
    SQZ_WRLOCK(&f->lock, SQZ_RANK_FILE);
    int rc = take_bg_err(f);
    /* older versions in flight must not land after the copy */
    if (rc == 0)
        rc = sqz_file_commit_inflight(f, 1);
    uint64_t new_len = hi << f->log2bs;
    if (new_len < f->committed_len)
        new_len = f->committed_len;
    if (rc == 0)
        rc = sqz_ctr_commit(f->c, p, n, new_len);
    if (rc == 0) {
        sqz_file_drop_dirty(f, lo, hi);
        for (uint64_t i = lo; i < hi; i++)
            sqz_cache_drop(f->e->cache, f->fid, i);
        f->committed_len = new_len;
        if (f->length < new_len)
            f->length = new_len;
        if (is_clean(f))
            atomic_store(&f->link.dirty_since, 0);
        atomic_fetch_add(&f->e->st.logical_bytes_written, n * f->bs);
    }
    SQZ_RWUNLOCK(&f->lock);
    return rc;
}
