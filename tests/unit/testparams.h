/* Container params for a unit test: alg at its default level, a block
 * size of 2^log2bs, the default min_saving. */
#ifndef SQZ_TESTPARAMS_H
#define SQZ_TESTPARAMS_H
#include "squeezefs/codec.h"
#include "squeezefs/container.h"

static inline sqz_params params_of(sqz_alg alg, int log2bs)
{
    sqz_params p = {0};
    p.alg = alg;
    p.level = sqz_level_default(alg);
    p.log2bs = log2bs;
    p.min_saving = SQZ_MIN_SAVING_DEFAULT;
    return p;
}
#endif
