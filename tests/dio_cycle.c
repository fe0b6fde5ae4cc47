/* Asynchronous direct writes against buffered readers (the pattern of
 * xfstests generic/451, without libaio): rewrite a file again and again with
 * one of two patterns by an AIO O_DIRECT write, then read it back through a
 * new buffered open; meanwhile child processes read it buffered in a loop.
 * Every buffered read after a completed write must see that write's bytes.
 *
 * Usage: dio_cycle FILE SIZE SECONDS READERS
 * Exit: 0 no stale read, 1 a stale read (printed), 2 usage or I/O error.
 * Build: cc -O1 -o dio_cycle dio_cycle.c */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static int aio_write_wait(aio_context_t ctx, int fd, void *buf, size_t n)
{
    struct iocb cb;
    memset(&cb, 0, sizeof(cb));
    cb.aio_fildes = (unsigned)fd;
    cb.aio_lio_opcode = IOCB_CMD_PWRITE;
    cb.aio_buf = (unsigned long)buf;
    cb.aio_nbytes = n;
    cb.aio_offset = 0;
    struct iocb *cbs[1] = {&cb};
    if (syscall(SYS_io_submit, ctx, 1, cbs) != 1)
        return -1;
    struct io_event ev;
    if (syscall(SYS_io_getevents, ctx, 1, 1, &ev, NULL) != 1)
        return -1;
    return ev.res == (long)n ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    const char *path = argv[1];
    size_t n = strtoul(argv[2], NULL, 0);
    double secs = atof(argv[3]);
    int readers = atoi(argv[4]);
    void *pat[2], *cmp = malloc(n);
    for (int i = 0; i < 2; i++) {
        if (posix_memalign(&pat[i], 4096, n) != 0)
            return 2;
        memset(pat[i], i ? 0xaa : 0x55, n);
    }
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
    if (fd < 0 || pwrite(fd, pat[0], n, 0) != (ssize_t)n || fsync(fd) != 0)
        return 2;
    close(fd);
    pid_t kids[64];
    if (readers > 64)
        readers = 64;
    for (int r = 0; r < readers; r++) {
        kids[r] = fork();
        if (kids[r] == 0) {
            char *b = malloc(n);
            for (;;) {
                int rfd = open(path, O_RDONLY);
                if (rfd >= 0) {
                    if (pread(rfd, b, n, 0) < 0)
                        _exit(2);
                    close(rfd);
                }
            }
        }
    }
    aio_context_t ctx = 0;
    if (syscall(SYS_io_setup, 8, &ctx) != 0)
        return 2;
    int rc = 0;
    long loops = 0;
    double end = now() + secs;
    for (int i = 1; rc == 0 && now() < end; i ^= 1, loops++) {
        int wfd = open(path, O_DIRECT | O_RDWR);
        if (wfd < 0 || aio_write_wait(ctx, wfd, pat[i], n) != 0) {
            perror("direct write");
            rc = 2;
            break;
        }
        close(wfd);
        int cfd = open(path, O_RDONLY);
        if (cfd < 0 || pread(cfd, cmp, n, 0) != (ssize_t)n) {
            perror("buffered read");
            rc = 2;
            break;
        }
        close(cfd);
        if (memcmp(cmp, pat[i], n) != 0) {
            size_t at = 0;
            while (((unsigned char *)cmp)[at] == ((unsigned char *)pat[i])[at])
                at++;
            printf("stale data from a buffered read after write %ld: byte %zu "
                   "is 0x%02x, want 0x%02x\n", loops, at,
                   ((unsigned char *)cmp)[at], ((unsigned char *)pat[i])[at]);
            rc = 1;
        }
    }
    for (int r = 0; r < readers; r++) {
        kill(kids[r], SIGKILL);
        waitpid(kids[r], NULL, 0);
    }
    if (rc == 0)
        printf("%ld writes, no stale read\n", loops);
    return rc;
}
