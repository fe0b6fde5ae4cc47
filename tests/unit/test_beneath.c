/* sqz_open_beneath (src/common/beneath.h): paths below a directory
 * descriptor open, a symlink in any component, a "..", an absolute path do
 * not; the same for the fallback walk of kernels without openat2. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/beneath.h"
#include "testutil.h"

typedef int (*open_fn)(int, const char *, int, mode_t);

/* 1 if fd is the file rel of dfd (same inode), closing fd. */
static int is(int fd, int dfd, const char *rel)
{
    struct stat a, b;
    int ok = fd >= 0 && fstat(fd, &a) == 0 &&
             fstatat(dfd, rel, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
             a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    if (fd >= 0)
        close(fd);
    return ok;
}

static void check(open_fn op, int root, int outside)
{
    CHECK(is(op(root, "a/b/f", O_RDONLY, 0), root, "a/b/f"));
    CHECK(is(op(root, "a/./b//f", O_RDONLY, 0), root, "a/b/f"));
    CHECK(is(op(root, "a/b", O_RDONLY | O_DIRECTORY, 0), root, "a/b"));
    CHECK(is(op(root, "", O_RDONLY | O_DIRECTORY, 0), root, "."));
    CHECK(is(op(root, "a", O_PATH | O_DIRECTORY, 0), root, "a"));
    /* a symlink anywhere: to a directory outside, to one inside */
    int r = op(root, "out/f", O_RDONLY, 0);
    CHECK(r == -ELOOP || r == -ENOTDIR);
    r = op(root, "in/b/f", O_RDONLY, 0);
    CHECK(r == -ELOOP || r == -ENOTDIR);
    r = op(root, "a/lnk", O_RDONLY, 0);
    CHECK_EQ_INT(r, -ELOOP);
    r = op(root, "out", O_RDONLY | O_DIRECTORY, 0);
    CHECK(r == -ELOOP || r == -ENOTDIR);
    /* the symlink itself, as openat's O_PATH | O_NOFOLLOW gives it */
    r = op(root, "a/lnk", O_PATH | O_NOFOLLOW, 0);
    struct stat st;
    CHECK(r >= 0 && fstat(r, &st) == 0 && S_ISLNK(st.st_mode));
    if (r >= 0)
        close(r);
    /* up and out */
    CHECK_EQ_INT(op(root, "../outside/f", O_RDONLY, 0), -EXDEV);
    CHECK_EQ_INT(op(root, "a/../../outside/f", O_RDONLY, 0), -EXDEV);
    CHECK_EQ_INT(op(root, "/etc/hostname", O_RDONLY, 0), -EXDEV);
    CHECK_EQ_INT(op(root, "a/nope", O_RDONLY, 0), -ENOENT);
    /* created below, with its mode; not through a symlinked directory */
    r = op(root, "a/b/new", O_RDWR | O_CREAT | O_EXCL, 0640);
    CHECK(r >= 0 && fstat(r, &st) == 0 && (st.st_mode & 0777) == 0640);
    if (r >= 0)
        close(r);
    CHECK(unlinkat(root, "a/b/new", 0) == 0);
    r = op(root, "out/new", O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(r == -ELOOP || r == -ENOTDIR);
    CHECK(faccessat(outside, "new", F_OK, AT_SYMLINK_NOFOLLOW) != 0);
}

int main(void)
{
    char *dir = sqz_test_tmpdir();
    REQUIRE(dir);
    char p[4096];
    int top = open(dir, O_RDONLY | O_DIRECTORY);
    REQUIRE(top >= 0);
    REQUIRE(mkdirat(top, "root", 0755) == 0);
    REQUIRE(mkdirat(top, "outside", 0755) == 0);
    int root = openat(top, "root", O_RDONLY | O_DIRECTORY);
    int outside = openat(top, "outside", O_RDONLY | O_DIRECTORY);
    REQUIRE(root >= 0 && outside >= 0);
    REQUIRE(mkdirat(root, "a", 0755) == 0 && mkdirat(root, "a/b", 0755) == 0);
    int fd = openat(root, "a/b/f", O_WRONLY | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    close(fd);
    fd = openat(outside, "f", O_WRONLY | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    close(fd);
    snprintf(p, sizeof p, "%s/outside", dir);
    REQUIRE(symlinkat(p, root, "out") == 0);
    REQUIRE(symlinkat("a", root, "in") == 0);
    REQUIRE(symlinkat("b/f", root, "a/lnk") == 0);
    check(sqz_open_beneath, root, outside);
    check(sqz_open_beneath_walk, root, outside);
    close(root);
    close(outside);
    close(top);
    snprintf(p, sizeof p, "rm -rf '%s'", dir);
    if (system(p) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(dir);
    return sqz_test_done("beneath");
}
