#!/usr/bin/env bash
# Build libfuse >= 3.18 with FUSE over io_uring into a prefix of its own
# (default /opt/squeezefs/libfuse; SQZ_LIBFUSE_PREFIX overrides it), from
# the distribution's own source package, where the system's libfuse is
# older (Debian 12 ships 3.14). meson.build uses that prefix when it holds
# a libfuse (option libfuse_prefix), else the system's; `squeezefs -o
# io_uring` needs it (docs/squeezefs.8).
#
# The machine's apt configuration is not changed: the source package comes
# through a private sources list and private list/cache directories
# (apt-get -o Dir::Etc::sourcelist=... -o Dir::Etc::sourceparts=- ...),
# one `deb-src` line for Debian unstable on the mirror the machine's own
# apt configuration names (no host name is written here). Its build needs
# liburing-dev and libnuma-dev (installed from the machine's own sources).
#
# Idempotent: an existing prefix built with io_uring is kept (a second run
# takes well under a second). Exit status 0 when the library is there (or
# the system's is new enough), 1 otherwise, with the reason on stderr; the
# caller (tools/install-deps.sh) goes on without it: squeezefs then builds
# against the system's libfuse, /dev/fuse only.
#
# Usage: tools/build-libfuse.sh [--force]   (as root, or a user with sudo)
set -euo pipefail

log() { printf 'build-libfuse: %s\n' "$*" >&2; }
fail() { log "NOT BUILT: $*"; log "squeezefs builds against the system's libfuse (/dev/fuse only, no -o io_uring)"; exit 1; }

PREFIX=${SQZ_LIBFUSE_PREFIX:-/opt/squeezefs/libfuse}
SUITE=${SQZ_LIBFUSE_SUITE:-unstable}
STAMP=$PREFIX/.squeezefs-libfuse
force=0
[[ ${1:-} == --force ]] && force=1

SUDO=()
[[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null 2>&1 && SUDO=(sudo -n)

ver_ge() { dpkg --compare-versions "$1" ge "$2"; }

# Already built (with io_uring: the stamp records it)?
if [[ $force -eq 0 && -f $STAMP && -f $PREFIX/lib/pkgconfig/fuse3.pc ]] &&
    grep -q '^io_uring=1$' "$STAMP"; then
    log "present: $(grep '^version=' "$STAMP" | cut -d= -f2) in $PREFIX (io_uring on)"
    exit 0
fi
sysver=$(pkg-config --modversion fuse3 2>/dev/null || echo 0)
if [[ $force -eq 0 ]] && ver_ge "$sysver" 3.18; then
    log "the system's libfuse $sysver is new enough; nothing to build"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 || fail "no apt-get"
command -v dpkg-source >/dev/null 2>&1 || fail "no dpkg-source (package dpkg-dev)"

# Build dependencies from the machine's own sources (bookworm: liburing 2.3).
need=()
for p in liburing-dev libnuma-dev meson ninja-build pkg-config gcc; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [[ ${#need[@]} -gt 0 ]]; then
    log "installing build dependencies: ${need[*]}"
    "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${need[@]}" >&2 ||
        { "${SUDO[@]}" apt-get update -q >&2 &&
          "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${need[@]}" >&2; } ||
        fail "could not install ${need[*]}"
fi

# The Debian mirror of the machine's own configuration: the first URI of a
# deb822 entry (or a one-line "deb" entry) that carries the release's main
# suite (VERSION_CODENAME), with the keyring that entry names.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ -n $codename ]] || fail "no VERSION_CODENAME in /etc/os-release"
mirror="" keyring=""
for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    # deb822 stanzas are separated by blank lines.
    read -r mirror keyring < <(awk -v cn="$codename" '
        function flush() { if (uri != "" && suite_ok && !found) { print uri, key; found = 1 }
                           uri = ""; key = ""; suite_ok = 0 }
        /^[[:space:]]*$/ { flush(); next }
        /^[[:space:]]*#/ { next }
        tolower($1) == "uris:" { uri = $2 }
        tolower($1) == "signed-by:" { key = $2 }
        tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == cn) suite_ok = 1 }
        END { flush() }' "$f") || true
    [[ -n $mirror ]] && break
done
if [[ -z $mirror && -f /etc/apt/sources.list ]]; then
    mirror=$(awk -v cn="$codename" '$1 == "deb" {
            for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) break
            if ($(i + 1) == cn) { print $i; exit } }' /etc/apt/sources.list)
fi
[[ -n $mirror ]] || fail "no Debian mirror for '$codename' in the machine's apt configuration"
[[ -n $keyring && -f $keyring ]] || keyring=/usr/share/keyrings/debian-archive-keyring.gpg
log "source package fuse3 from $SUITE on $mirror (the machine's mirror)"

work=$(mktemp -d "${TMPDIR:-/tmp}/squeezefs-libfuse.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
printf 'deb-src [signed-by=%s] %s %s main\n' "$keyring" "$mirror" "$SUITE" >"$work/sources.list"
APT=(-o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=-
     -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
     -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
     -o APT::Sandbox::User=root -q)
apt-get "${APT[@]}" update >"$work/apt-update.log" 2>&1 ||
    { cat "$work/apt-update.log" >&2; fail "apt-get update of the private deb-src list failed"; }
srcver=$(apt-cache "${APT[@]}" showsrc fuse3 2>/dev/null | awk '$1 == "Version:" { print $2 }' | sort -V | tail -1)
[[ -n $srcver ]] || fail "no fuse3 source package in $SUITE"
ver_ge "$srcver" 3.18 || fail "fuse3 in $SUITE is $srcver, older than 3.18"
(cd "$work/src" && apt-get "${APT[@]}" source "fuse3=$srcver") >"$work/apt-source.log" 2>&1 ||
    { cat "$work/apt-source.log" >&2; fail "apt-get source fuse3=$srcver failed"; }
srcdir=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d -name 'fuse3-*' | head -1)
[[ -n $srcdir ]] || fail "apt-get source left no fuse3-* directory"

# The library only (no fusermount3, udev rules or init script: the
# system's fusermount3 serves mounts by non-root users), io_uring on.
log "building libfuse $srcver into $PREFIX"
(cd "$srcdir" &&
    meson setup "$work/build" --prefix="$PREFIX" --libdir=lib --buildtype=release \
        -Denable-io-uring=true -Dutils=false -Dexamples=false -Dtests=false \
        -Duseroot=false -Dinitscriptdir= -Dudevrulesdir="$PREFIX/udev" &&
    ninja -C "$work/build") >"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log" >&2; fail "libfuse $srcver did not build"; }
lib=$(find "$work/build" -name 'libfuse3.so.*.*' -type f | head -1)
syms=$( [[ -n $lib ]] && nm -D "$lib" 2>/dev/null || true)
[[ $syms == *" U io_uring_queue_init"* ]] ||
    fail "libfuse $srcver configured without io_uring (liburing with SQE128 and libnuma needed)"
"${SUDO[@]}" rm -rf "$PREFIX"
"${SUDO[@]}" meson install -C "$work/build" --quiet >"$work/install.log" 2>&1 ||
    { cat "$work/install.log" >&2; fail "meson install into $PREFIX failed"; }
printf 'version=%s\nsuite=%s\nio_uring=1\n' "$srcver" "$SUITE" | "${SUDO[@]}" tee "$STAMP" >/dev/null
log "built libfuse $srcver with io_uring in $PREFIX"
