/* Validation of compression parameters (sqz_params_check). */
#include <errno.h>
#include <stdio.h>

#include "common/errbuf.h"
#include "squeezefs/container.h"

int sqz_params_check(const sqz_params *p, char *err, size_t errlen)
{
    if (!p) {
        sqz_errf(err, errlen, "no parameters");
        return -EINVAL;
    }
    if (!sqz_alg_valid((int)p->alg)) {
        sqz_errf(err, errlen, "unknown compression algorithm %d", (int)p->alg);
        return -EINVAL;
    }
    if (sqz_level_check(p->alg, p->level, err, errlen) < 0)
        return -EINVAL;
    if (p->log2bs < SQZ_LOG2BS_MIN || p->log2bs > SQZ_LOG2BS_MAX) {
        sqz_errf(err, errlen, "block size 2^%d is out of range 2^%d..2^%d",
                 p->log2bs, SQZ_LOG2BS_MIN, SQZ_LOG2BS_MAX);
        return -EINVAL;
    }
    if (p->min_saving > 1000) {
        sqz_errf(err, errlen, "min_saving %u is out of range 0..1000 permille",
                 p->min_saving);
        return -EINVAL;
    }
    if (p->auto_mode > 3) {
        sqz_errf(err, errlen, "auto mode %u is out of range 0..3",
                 (unsigned)p->auto_mode);
        return -EINVAL;
    }
    return 0;
}
