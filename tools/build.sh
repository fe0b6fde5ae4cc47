#!/usr/bin/env bash
# Configure (or reconfigure) and build squeezefs with meson + ninja.
#
# Usage: tools/build.sh [BUILDDIR] [meson args...]
#   BUILDDIR defaults to build/. Defaults: -Dbuildtype=debugoptimized
#   -Dwerror=true; later meson args override them, e.g.
#   tools/build.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false
#   Environment: CC (e.g. CC=clang), NINJA_TARGETS (build only these targets).
set -euo pipefail
cd "$(dirname "$0")/.."

builddir=build
if [[ $# -gt 0 && $1 != -* ]]; then
    builddir=$1
    shift
fi
args=(-Dbuildtype=debugoptimized -Dwerror=true "$@")

for c in meson ninja; do
    command -v "$c" >/dev/null 2>&1 || { echo "build.sh: $c not found (run tools/install-deps.sh)" >&2; exit 1; }
done

if [[ -f $builddir/meson-private/coredata.dat ]]; then
    # Existing build dir: apply the (possibly changed) options.
    if ! meson setup --reconfigure "$builddir" "${args[@]}"; then
        echo "build.sh: reconfigure failed, wiping $builddir" >&2
        meson setup --wipe "$builddir" "${args[@]}"
    fi
else
    if [[ -e $builddir ]]; then
        echo "build.sh: $builddir exists but is not a meson build dir; recreating it" >&2
        rm -rf "$builddir"
    fi
    meson setup "$builddir" "${args[@]}"
fi

# shellcheck disable=SC2086
ninja -C "$builddir" ${NINJA_TARGETS:-}
echo "build.sh: built $builddir"
