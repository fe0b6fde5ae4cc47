#!/usr/bin/env bash
# squeezefs demo: install dependencies, build, mount a demo BACKING dir,
# copy sample data (TAQ-like CSV, logs) in and show what it costs on disk.
#
# Usage: tools/demo.sh [--keep] [DIR]
#   DIR     where the demo lives (default /tmp/squeezefs-demo): DIR/backing,
#           DIR/mnt, DIR/src (the sample data)
#   --keep  leave it mounted (prints how to unmount)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

KEEP=0
DIR=
for a in "$@"; do
    case $a in
        --keep) KEEP=1 ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        -*) echo "demo.sh: unknown option $a" >&2; exit 2 ;;
        *) DIR=$a ;;
    esac
done
DIR=${DIR:-/tmp/squeezefs-demo}

# Root is needed (apt-get, FUSE mounts). Root runs it as it is; a user with
# sudo is re-run through sudo (asking for the password on a terminal).
if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null 2>&1; then
    if sudo -n true 2>/dev/null; then
        exec sudo -n -E env "PATH=$PATH" bash "$0" "$@"
    elif [[ -t 0 ]]; then
        echo "demo.sh: re-running as root with sudo" >&2
        exec sudo -E env "PATH=$PATH" bash "$0" "$@"
    fi
fi

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "installing dependencies"
bash tools/install-deps.sh
step "building"
bash tools/build.sh build >/dev/null
SQZ=$ROOT/build/squeezefs
[[ -x $SQZ ]] || { echo "demo.sh: $SQZ was not built" >&2; exit 1; }

BACKING=$DIR/backing
MNT=$DIR/mnt
SRC=$DIR/src
LOG=$DIR/daemon.log
mounted() { grep -q " $(realpath "$MNT") " /proc/self/mountinfo 2>/dev/null; }

mkdir -p "$DIR" "$MNT"
if mounted; then
    echo "demo.sh: unmounting an earlier demo mount at $MNT"
    fusermount3 -u "$MNT" || fusermount3 -uz "$MNT"
fi
rm -rf "$BACKING" "$SRC"
mkdir -p "$BACKING" "$SRC"

DAEMON=
cleanup() {
    local rc=$?
    if [[ $KEEP -eq 1 && $rc -eq 0 ]]; then
        return
    fi
    if mounted; then
        fusermount3 -u "$MNT" 2>/dev/null || { sleep 1; fusermount3 -uz "$MNT" 2>/dev/null || true; }
    fi
    if [[ -n $DAEMON ]]; then
        wait "$DAEMON" 2>/dev/null || true
    fi
    if [[ $rc -ne 0 ]]; then
        echo "demo.sh: FAILED (exit $rc); daemon log: $LOG" >&2
        tail -n 20 "$LOG" >&2 2>/dev/null || true
    fi
}
trap cleanup EXIT

step "generating sample data in $SRC"
if "$SQZ" bench --gen taq-trade --size 8M --dump "$SRC/taq-trade.bin" >/dev/null 2>&1 \
        && [[ -s $SRC/taq-trade.bin ]]; then
    echo "taq-trade.bin: binary TAQ-like columns from 'squeezefs bench --gen taq-trade --dump'"
else
    rm -f "$SRC/taq-trade.bin"
fi
python3 - "$SRC/trades.csv" <<'EOF'
import random, sys
rnd = random.Random(1)
syms = ["AAPL", "MSFT", "IBM", "GOOG", "AMZN", "JPM", "XOM", "KO"]
px = {s: 50 + 20 * i for i, s in enumerate(syms)}
with open(sys.argv[1], "w") as f:
    f.write("time,sym,price,size,exchange,cond\n")
    t = 9.5 * 3600 * 1e6
    for i in range(180000):
        s = rnd.choice(syms)
        px[s] = round(max(1, px[s] + rnd.choice((-1, 0, 0, 1)) * 0.01), 2)
        t += rnd.expovariate(1 / 50000)
        us = int(t)
        f.write(f"{us // 3600000000:02d}:{us // 60000000 % 60:02d}:{us // 1000000 % 60:02d}."
                f"{us % 1000000:06d},{s},{px[s]:.2f},{rnd.choice((100, 200, 300, 500, 1000))},"
                f"{rnd.choice('NQPZK')},{rnd.choice(('@', 'F', 'T', '@'))}\n")
EOF
echo "trades.csv: TAQ-like CSV text"
python3 - "$SRC" <<'EOF'
import os, random, sys
rnd = random.Random(2)
os.makedirs(os.path.join(sys.argv[1], "logs"), exist_ok=True)
lv = ["INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"]
for d in range(3):
    with open(os.path.join(sys.argv[1], "logs", f"app-2026-11-2{d}.log"), "w") as f:
        for i in range(25000):
            f.write(f"2026-11-2{d}T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z "
                    f"{rnd.choice(lv)} worker-{rnd.randint(1, 8)} request id={rnd.getrandbits(32):08x} "
                    f"took {rnd.randint(1, 900)}ms status={rnd.choice((200, 200, 200, 404, 500))}\n")
with open(os.path.join(sys.argv[1], "random.bin"), "wb") as f:
    f.write(os.urandom(1 << 20))   # incompressible: stored raw
EOF
du -sh "$SRC"

step "mounting: squeezefs $BACKING $MNT (default options)"
if [[ $KEEP -eq 1 ]]; then
    # stays mounted after this script: let it daemonize (no -f)
    "$SQZ" "$BACKING" "$MNT" >"$LOG" 2>&1
else
    "$SQZ" -f "$BACKING" "$MNT" >"$LOG" 2>&1 &
    DAEMON=$!
fi
for _ in $(seq 200); do
    mounted && break
    if [[ -n $DAEMON ]] && ! kill -0 "$DAEMON" 2>/dev/null; then
        echo "demo.sh: the daemon exited:" >&2; cat "$LOG" >&2; exit 1
    fi
    sleep 0.1
done
mounted || { echo "demo.sh: mount did not appear" >&2; exit 1; }
grep " $(realpath "$MNT") " /proc/self/mountinfo | awk '{print "mounted:", $5, $(NF-2)}'

step "copying the data in"
cp -r "$SRC/." "$MNT/"
sync
ls -lR "$MNT"

step "space: logical (mount) vs stored (backing)"
echo "mount   (apparent): $(du -sh --apparent-size "$MNT" | cut -f1)"
echo "backing (on disk):  $(du -sh "$BACKING" | cut -f1)"
cmp "$SRC/trades.csv" "$MNT/trades.csv" && echo "trades.csv reads back identical"

step "squeezefs stat trades.csv"
"$SQZ" stat "$BACKING/trades.csv" || "$SQZ" stat "$MNT/trades.csv"

step "squeezefs stats $MNT"
"$SQZ" stats "$MNT"

step "squeezefs verify $BACKING"
"$SQZ" verify "$BACKING"

if [[ $KEEP -eq 1 ]]; then
    step "left mounted (--keep)"
    echo "explore $MNT (data) and $BACKING (containers); unmount with:"
    echo "  fusermount3 -u $MNT"
else
    step "unmounting"
    fusermount3 -u "$MNT"
    wait "$DAEMON" && echo "daemon exited cleanly"
    DAEMON=
fi
echo "demo done"
