/* libFuzzer target: the input is a backing file. Open it read-only, read
 * every block and the whole byte range, stat and verify. Must never crash,
 * leak or hang, whatever the bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "squeezefs/container.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static void no_log(void *user, int level, const char *msg)
{
    (void)user;
    (void)level;
    (void)msg;
}

static void no_report(void *user, const char *msg)
{
    (void)user;
    (void)msg;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    sqz_set_log(no_log, NULL);
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, d + done, n - done);
        if (w <= 0) {
            close(fd);
            return 0;
        }
        done += (size_t)w;
    }
    sqz_verify_fd(fd, "fuzz", no_report, NULL);
    sqz_ctr_probe_fd(fd);
    sqz_ctr *c;
    if (sqz_ctr_open_fd(fd, SQZ_OPEN_RDONLY, "fuzz", &c) != 0)
        return 0;
    size_t bs = sqz_ctr_block_size(c);
    unsigned char *buf = malloc(bs);
    uint64_t nb = sqz_ctr_nblocks(c);
    if (buf) {
        /* at most 4096 blocks: a sparse 16 TiB length is legal */
        for (uint64_t b = 0; b < nb && b < 4096; b++)
            sqz_ctr_read_block(c, b, buf, NULL);
        uint64_t len = sqz_ctr_length(c);
        for (uint64_t off = 0; off < len && off < 4096 * (uint64_t)bs; off += bs)
            sqz_ctr_pread(c, buf, bs, off);
    }
    struct sqz_ctr_stat st;
    sqz_ctr_stat(c, &st);
    sqz_ctr_verify(c, no_report, NULL);
    free(buf);
    sqz_ctr_close(c);
    return 0;
}
