"""pytest fixtures: the squeezefs binary and real mounts in temp dirs."""
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import Mount, require_fuse, squeezefs_bin, run_cli, system_python  # noqa: E402


LONG_ONLY = "long mode only (tools/test.sh --long)"


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test (tools/test.sh --long runs more)")
    config.addinivalue_line("markers", "long: only with SQZ_LONG=1 (tools/test.sh --long)")


def sanitizer_subset(items):
    """Under a sanitizer (SQZ_QUICK=1, tools/test.sh's ASan and TSan
    stages; not with --long) a test module that names its SANITIZER_SUBSET (test names, with
    or without the parameter id) runs only those tests (deselected, not
    skipped: the plain stage runs them all). Returns (kept, deselected)."""
    kept, dropped = [], []
    for it in items:
        subset = getattr(it.module, "SANITIZER_SUBSET", None)
        if subset is None or it.name in subset or it.originalname in subset:
            kept.append(it)
        else:
            dropped.append(it)
    return kept, dropped


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SQZ_QUICK") == "1" and os.environ.get("SQZ_LONG") != "1":
        kept, dropped = sanitizer_subset(items)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    if os.environ.get("SQZ_LONG") == "1":
        return
    skip = pytest.mark.skip(reason=LONG_ONLY)
    for it in items:
        if "long" in it.keywords:
            it.add_marker(skip)


def _skip_reason(rep):
    lr = rep.longrepr
    reason = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


def pytest_terminal_summary(terminalreporter):
    """The stage summary says how many tests that carry a promise did not
    run, and why (a skip is not a pass). The long-mode-only tests are
    counted apart: the default run covers their promises at a smaller
    size."""
    counts, long_only = {}, 0
    for rep in terminalreporter.stats.get("skipped", []):
        reason = _skip_reason(rep)
        if reason == LONG_ONLY:
            long_only += 1
        else:
            counts[reason] = counts.get(reason, 0) + 1
    n = sum(counts.values())
    why = "; ".join(f"{v}x {k}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    terminalreporter.write_sep("-", "skips")
    terminalreporter.write_line(f"skipped promise-carrying tests: {n}" + (f" ({why})" if n else ""))
    if long_only:
        terminalreporter.write_line(f"long-mode-only tests not run: {long_only}")


@pytest.fixture(scope="session")
def sqz_bin():
    b = squeezefs_bin()
    if not os.path.exists(b):
        pytest.fail(f"squeezefs binary not found at {b}: build first (tools/build.sh)")
    return b


@pytest.fixture
def cli(sqz_bin):
    return run_cli


@pytest.fixture
def mount_factory(tmp_path, sqz_bin):
    """mount_factory(options=(), backing=None, name='mnt') -> Mount.
    Every mount made here is unmounted at teardown, whatever happened."""
    require_fuse()
    made = []

    def make(options=(), backing=None, name="mnt", **kw):
        b = backing or tmp_path / (name + "-backing")
        os.makedirs(b, exist_ok=True)
        m = Mount(b, tmp_path / name, options=options, **kw)
        made.append(m)
        return m

    yield make
    for m in made:
        if m.proc is not None:
            try:
                m.unmount(timeout=30)
            except Exception:
                m.kill()


@pytest.fixture
def mnt(mount_factory):
    """A squeezefs mount with default options."""
    return mount_factory()


@pytest.fixture
def public_mount_factory(sqz_bin):
    """Like mount_factory, but the mount lives in a world-traversable temp
    dir (mode 0755, outside pytest's 0700 basetemp) so that tests can access
    it as another user (e.g. uid 65534 with -o allow_other).
    public_mount_factory(options=(), backing=None, name='mnt') -> Mount."""
    import tempfile
    require_fuse()
    base = tempfile.mkdtemp(prefix="sqz-public-")
    os.chmod(base, 0o755)
    made = []

    def make(options=(), backing=None, name="mnt", **kw):
        b = backing or os.path.join(base, name + "-backing")
        os.makedirs(b, exist_ok=True)
        m = Mount(b, os.path.join(base, name), options=options, **kw)
        made.append(m)
        return m

    yield make
    for m in made:
        if m.proc is not None:
            try:
                m.unmount(timeout=30)
            except Exception:
                m.kill()
    if not any(m.proc is not None for m in made):
        shutil.rmtree(base, ignore_errors=True)


def run_as(uid, code, gid=None, timeout=60):
    """Run Python `code` in a child process as uid (and gid, default = uid)
    and return CompletedProcess (text). For permission tests."""
    gid = uid if gid is None else gid

    def demote():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return subprocess.run([system_python(), "-c", code], capture_output=True,
                          text=True, timeout=timeout, preexec_fn=demote,
                          cwd="/")


@pytest.fixture
def squeezefs_on_path(sqz_bin):
    """mount(8) and mount.fuse3 find `squeezefs` through the system PATH:
    the binary under test is linked into /usr/local/bin for the test (and
    the link removed after). Skips without root or mount.fuse3, or when
    another squeezefs is installed there."""
    if os.geteuid() != 0 or not shutil.which("mount.fuse3"):
        pytest.skip("needs root and mount.fuse3")
    link = "/usr/local/bin/squeezefs"
    if os.path.lexists(link) and os.path.realpath(link) != os.path.realpath(sqz_bin):
        pytest.skip(f"{link} exists and is another binary")
    made = not os.path.lexists(link)
    if made:
        os.symlink(sqz_bin, link)
    try:
        yield link
    finally:
        if made:
            os.unlink(link)

