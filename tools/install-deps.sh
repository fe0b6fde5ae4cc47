#!/usr/bin/env bash
# Install everything squeezefs needs to build, test, fuzz and benchmark on
# Debian 12 (bookworm). Idempotent: only what is missing is installed (one
# `apt-get update` + one `apt-get install`), python modules are added for the
# python3 found on PATH (which may be pyenv's rather than Debian's).
# Also makes sure /dev/fuse exists and fusectl is mounted.
#
# Usage: tools/install-deps.sh (as root, or a user with sudo)
set -euo pipefail

log() { printf 'install-deps: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo -n)
    else
        log "warning: not root and no sudo; installs will probably fail"
    fi
fi

export DEBIAN_FRONTEND=noninteractive

APT_PKGS=(
    libfuse3-dev fuse3 libzstd-dev liblz4-dev libsnappy-dev zlib1g-dev
    libxxhash-dev meson ninja-build pkg-config gcc clang libclang-rt-14-dev
    attr acl fio mergerfs python3-pytest rsync sqlite3 postgresql git
    debhelper dpkg-dev
    e2fsprogs util-linux kmod procps groff-base man-db btrfs-progs btrfs-compsize
    strace
)

# Is the python3 on PATH Debian's own (modules come from apt) or another
# one (pyenv, venv: modules come from pip)?
PY=$(command -v python3 || true)
py_is_debian=0
if [[ -z $PY ]]; then
    APT_PKGS+=(python3)
    py_is_debian=1
elif "$PY" -c 'import sys; sys.exit(0 if sys.prefix == "/usr" else 1)' 2>/dev/null; then
    py_is_debian=1
fi
if [[ $py_is_debian -eq 1 ]]; then
    APT_PKGS+=(python3-numpy python3-matplotlib)
fi

missing=()
for p in "${APT_PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if [[ ${#missing[@]} -gt 0 ]]; then
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install by hand: ${missing[*]}"
    log "installing: ${missing[*]}"
    # Do not let package scripts start services (postgresql) in containers
    # without an init system; harmless elsewhere (removed afterwards).
    policy_rc=/usr/sbin/policy-rc.d
    added_policy=0
    if [[ ! -e $policy_rc ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy_rc" >/dev/null
        "${SUDO[@]}" chmod 755 "$policy_rc"
        added_policy=1
    fi
    cleanup_policy() { if [[ $added_policy -eq 1 ]]; then "${SUDO[@]}" rm -f "$policy_rc"; fi; }
    trap cleanup_policy EXIT
    "${SUDO[@]}" apt-get update -q
    "${SUDO[@]}" apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${missing[@]}"
    cleanup_policy
    trap - EXIT
else
    log "all Debian packages present"
fi

# Optional: GlusterFS (tests/test_gluster.py, tools/bench_gluster.py; both
# skip without it). Best effort, its own step: a failure here is logged and
# does not fail the script.
GLUSTER_PKGS=(glusterfs-server glusterfs-client)
gl_missing=()
for p in "${GLUSTER_PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        gl_missing+=("$p")
    fi
done
if [[ ${#gl_missing[@]} -gt 0 ]]; then
    log "optional: installing GlusterFS: ${gl_missing[*]}"
    gl_policy=/usr/sbin/policy-rc.d
    gl_added=0
    if [[ ! -e $gl_policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$gl_policy" >/dev/null && gl_added=1
        "${SUDO[@]}" chmod 755 "$gl_policy" || true
    fi
    if { [[ ${#missing[@]} -gt 0 ]] || "${SUDO[@]}" apt-get update -q; } &&
        "${SUDO[@]}" apt-get install -y -q --no-install-recommends \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
            "${gl_missing[@]}"; then
        log "optional: GlusterFS installed"
    else
        log "optional: could not install GlusterFS (${gl_missing[*]}); the GlusterFS tests and benchmark will be skipped"
    fi
    if [[ $gl_added -eq 1 ]]; then "${SUDO[@]}" rm -f "$gl_policy"; fi
else
    log "optional: GlusterFS present"
fi

# Optional: libfuse >= 3.18 with FUSE over io_uring (`squeezefs -o
# io_uring`) in a prefix of its own, built from Debian's source package
# where the system's libfuse is older (tools/build-libfuse.sh; fast when
# already built). Without it squeezefs builds against the system's
# libfuse, /dev/fuse only; a failure here does not fail the script.
if ! "$(dirname "$0")/build-libfuse.sh"; then
    log "optional: no libfuse with io_uring (see above); building against the system's libfuse"
fi

# Python modules for the python3 on PATH.
PY=$(command -v python3 || true)
[[ -n $PY ]] || die "python3 not found on PATH"
pip_missing=()
for m in pytest numpy matplotlib prometheus_client; do
    "$PY" -c "import $m" 2>/dev/null || pip_missing+=("$m")
done
if [[ ${#pip_missing[@]} -gt 0 ]]; then
    log "pip installing for $PY: ${pip_missing[*]}"
    if ! "$PY" -m pip --version >/dev/null 2>&1; then
        "$PY" -m ensurepip --upgrade >/dev/null 2>&1 || true
    fi
    export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore
    if ! "$PY" -m pip install --quiet "${pip_missing[@]}"; then
        # Debian's python refuses pip without this flag (PEP 668).
        "$PY" -m pip install --quiet --break-system-packages "${pip_missing[@]}" \
            || die "could not pip install ${pip_missing[*]} for $PY"
    fi
    for m in "${pip_missing[@]}"; do
        "$PY" -c "import $m" || die "python module $m still not importable by $PY"
    done
fi

# /dev/fuse and fusectl.
if [[ ! -c /dev/fuse ]]; then
    "${SUDO[@]}" modprobe fuse 2>/dev/null || true
    if [[ ! -c /dev/fuse ]]; then
        "${SUDO[@]}" mknod -m 0666 /dev/fuse c 10 229 || log "warning: could not create /dev/fuse"
    fi
fi
[[ -c /dev/fuse ]] && "${SUDO[@]}" chmod 0666 /dev/fuse 2>/dev/null || true
if [[ -d /sys/fs/fuse/connections ]] && ! grep -q ' /sys/fs/fuse/connections ' /proc/self/mountinfo; then
    "${SUDO[@]}" mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null \
        || log "note: could not mount fusectl (not needed for the tests)"
fi
# allow_other for non-root mounters (the real-program tests use allow_other).
if [[ -f /etc/fuse.conf ]] && ! grep -q '^[[:space:]]*user_allow_other' /etc/fuse.conf; then
    echo user_allow_other | "${SUDO[@]}" tee -a /etc/fuse.conf >/dev/null || true
fi

for c in meson ninja pkg-config gcc fusermount3; do
    command -v "$c" >/dev/null 2>&1 || die "$c still missing after install"
done
log "ok"
