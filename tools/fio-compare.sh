#!/usr/bin/env bash
# fio workloads (tools/fio/*.fio) on raw dir vs mergerfs passthrough vs
# squeezefs; see `tools/fio-compare.sh --help` (tools/fio_compare.py).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v fio >/dev/null 2>&1 || { echo "fio-compare: fio not found (run tools/install-deps.sh)" >&2; exit 2; }
exec python3 "$here/fio_compare.py" "$@"
