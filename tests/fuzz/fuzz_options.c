/* libFuzzer target: the mount option parser must never crash or leak,
 * whatever the option string. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/opts.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        return 0;
    memcpy(s, d, n);
    s[n] = '\0';
    struct sqz_mount_opts o;
    sqz_mount_opts_init(&o);
    char err[256];
    /* Twice: options accumulate across several -o. */
    if (sqz_parse_mount_options(s, &o, err, sizeof(err)) == 0)
        sqz_parse_mount_options(s, &o, err, sizeof(err));
    sqz_mount_opts_finish(&o);
    sqz_mount_opts_free(&o);
    free(s);
    return 0;
}
