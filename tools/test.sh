#!/usr/bin/env bash
# The whole squeezefs test suite (what CI runs through .ci/run).
#
# Usage: tools/test.sh [--long] [--quick] [--no-install]
#   --long        SQZ_LONG=1 for pytest (long tests, more crash rounds),
#                 600 s of fuzzing per target (FUZZ_SECONDS overrides) and
#                 more suites under ThreadSanitizer.
#   --quick       only deps, build/, unit tests and pytest on build/
#                 (skips the ASan and TSan builds + tests and fuzzing).
#   --no-install  do not run tools/install-deps.sh.
# Environment: FUZZ_SECONDS (default 50, --long 600), PYTEST_ARGS (extra
#   arguments for the pytest stages), PYTEST_TIMEOUT / ASAN_PYTEST_TIMEOUT /
#   TSAN_PYTEST_TIMEOUT (seconds, safety nets against hangs).
#   Without /dev/fuse or fusermount3 every mount test fails (a stage that
#   skipped them all would pass without testing the product);
#   SQZ_ALLOW_NO_FUSE=1 makes them skip, except under CI=true. Under
#   CI=true the GlusterFS tests fail too when GlusterFS is not installed.
#   Each pytest stage ends with "skipped promise-carrying tests: N (why)".
#
# Stages (all are run; failures are remembered, not fatal):
#   deps, build, build-asan, build-tsan, unit, unit-asan, unit-tsan, pytest,
#   pytest-asan, pytest-tsan, fuzz-build, fuzz-container, fuzz-codec,
#   fuzz-policy, fuzz-options
# Prints the elapsed time of every stage and a final summary line; exits 1
# if any stage failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

LONG=0
QUICK=0
INSTALL=1
for a in "$@"; do
    case $a in
        --long) LONG=1 ;;
        --quick) QUICK=1 ;;
        --no-install) INSTALL=0 ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "test.sh: unknown argument '$a' (see --help)" >&2; exit 2 ;;
    esac
done

# The suite needs root (FUSE mounts with allow_other, tmpfs, setuid tests).
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        echo "test.sh: re-running as root with sudo" >&2
        exec sudo -n -E env "PATH=$PATH" bash "$0" "$@"
    elif command -v sudo >/dev/null 2>&1 && [[ -t 0 ]]; then
        echo "test.sh: re-running as root with sudo" >&2
        exec sudo -E env "PATH=$PATH" bash "$0" "$@"
    fi
    echo "test.sh: warning: not root and no passwordless sudo; root-only tests will skip or fail" >&2
fi

export PYTHONDONTWRITEBYTECODE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
export DEBIAN_FRONTEND=noninteractive
if [[ $LONG -eq 1 ]]; then
    export SQZ_LONG=1
    FUZZ_SECONDS=${FUZZ_SECONDS:-600}
    PYTEST_TIMEOUT=${PYTEST_TIMEOUT:-5400}
    ASAN_PYTEST_TIMEOUT=${ASAN_PYTEST_TIMEOUT:-1800}
    TSAN_PYTEST_TIMEOUT=${TSAN_PYTEST_TIMEOUT:-1800}
else
    FUZZ_SECONDS=${FUZZ_SECONDS:-30}
    PYTEST_TIMEOUT=${PYTEST_TIMEOUT:-1080}
    ASAN_PYTEST_TIMEOUT=${ASAN_PYTEST_TIMEOUT:-300}
    TSAN_PYTEST_TIMEOUT=${TSAN_PYTEST_TIMEOUT:-300}
fi
read -r -a EXTRA_PYTEST <<<"${PYTEST_ARGS:-}"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/squeezefs-test.XXXXXX")
T_START=$SECONDS
PASSED=()
FAILED=()
SKIPPED=()

# Lazily unmount FUSE mounts left under our work dir (a killed pytest).
cleanup_mounts() {
    local mp
    # mountinfo: field 5 is the mount point; fs type follows " - ".
    while read -r mp; do
        [[ -n $mp ]] || continue
        echo "test.sh: unmounting leftover $mp" >&2
        fusermount3 -uz "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
    done < <(awk -v w="$WORK" '{ for (i = 1; i <= NF; i++) if ($i == "-") break;
                                 if (index($5, w) == 1 && $(i+1) ~ /^fuse/) print $5 }' \
                 /proc/self/mountinfo | sort -r)
}
on_exit() {
    cleanup_mounts || true
    if [[ ${#FAILED[@]} -eq 0 ]]; then
        rm -rf "$WORK" 2>/dev/null || true
    else
        echo "test.sh: logs and temp files kept in $WORK" >&2
    fi
}
trap on_exit EXIT

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# run_stage NAME FUNCTION [ARGS...]: run in a subshell with errexit active,
# record the result and the elapsed time. Return code 77 = skipped.
run_stage() {
    local name=$1; shift
    local t0=$SECONDS rc
    echo
    echo "=================== [$name] start ($(date +%H:%M:%S))"
    set +e
    ( set -euo pipefail; "$@" )
    rc=$?
    set -e
    local dt=$((SECONDS - t0))
    if [[ $rc -eq 0 ]]; then
        PASSED+=("$name")
        echo "=================== [$name] PASSED in $(fmt_time $dt)"
    elif [[ $rc -eq 77 ]]; then
        SKIPPED+=("$name")
        echo "=================== [$name] SKIPPED in $(fmt_time $dt)"
    else
        FAILED+=("$name")
        echo "=================== [$name] FAILED (exit $rc) in $(fmt_time $dt)"
    fi
}

failed_stage() { local s; for s in "${FAILED[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }

# ---------------------------------------------------------------- stages
st_deps() { bash tools/install-deps.sh; }

st_build() { bash tools/build.sh build -Dwerror=true; }

st_build_asan() {
    bash tools/build.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dwerror=true
}

# ThreadSanitizer (gcc or clang, whichever CC is; PIE is the toolchain's
# default). The lock-order checks are on in this build too (no NDEBUG).
st_build_tsan() {
    bash tools/build.sh build-tsan -Db_sanitize=thread -Db_lundef=false -Dwerror=true
}

st_unit() {
    local dir=$1
    [[ -f $dir/build.ninja ]] || { echo "no $dir: its build failed" >&2; return 1; }
    meson test -C "$dir" --print-errorlogs
}

# TSan reports go to files; any report fails the stage (halt_on_error also
# stops the reporting process: exit 66).
TSAN_OPTS_BASE="halt_on_error=1:exitcode=66:second_deadlock_stack=1"

# Print the sanitizer report files in $1; 1 if there are any.
show_reports() {
    local f reports=("$1"/*)
    [[ -e ${reports[0]} ]] || return 0
    echo "sanitizer reports:" >&2
    for f in "${reports[@]}"; do echo "----- $f" >&2; head -n 80 "$f" >&2; done
    return 1
}

# The engine's unit tests (block cache, dirty blocks, worker pool, flusher)
# and the lock-order checks under TSan.
st_unit_tsan() {
    [[ -f build-tsan/build.ninja ]] || { echo "no build-tsan: its build failed" >&2; return 1; }
    local logs=$WORK/tsan-unit rc=0
    mkdir -p "$logs"
    TSAN_OPTIONS=$TSAN_OPTS_BASE:log_path=$logs/tsan \
        meson test -C build-tsan --print-errorlogs engine sparse lockorder || rc=$?
    show_reports "$logs" || [[ $rc -ne 0 ]] || rc=1
    return "$rc"
}

# pytest exit 5 (nothing collected) is a failure here: every stage must test.
run_pytest() {
    local timeout_s=$1; shift
    local rc=0
    timeout -k 30 "$timeout_s" python3 -m pytest -q -rfEs -p no:cacheprovider "$@" || rc=$?
    cleanup_mounts
    case $rc in
        0) return 0 ;;
        5) echo "pytest collected no tests: that is a failure here" >&2; return 1 ;;
        124|137) echo "pytest did not finish within ${timeout_s}s (killed)" >&2; return 1 ;;
        *) return "$rc" ;;
    esac
}

st_pytest() {
    [[ -x build/squeezefs ]] || { echo "build/squeezefs missing: the build failed" >&2; return 1; }
    SQUEEZEFS_BIN=$ROOT/build/squeezefs \
        run_pytest "$PYTEST_TIMEOUT" tests/ --basetemp="$WORK/pytest" "${EXTRA_PYTEST[@]}"
}

# The ASan/UBSan daemon under the POSIX, CLI, fsx and packed-file tests
# (SQZ_QUICK=1: fsx one configuration per algorithm, the packed-file tests'
# SANITIZER_SUBSET; with --long all of them). Sanitizer
# reports go to files (also when the daemon runs detached from a test's
# stderr); any report fails the stage.
st_pytest_asan() {
    [[ -x build-asan/squeezefs ]] || { echo "build-asan/squeezefs missing: the build failed" >&2; return 1; }
    local files=() f
    for f in tests/test_posix.py tests/test_cli.py tests/test_fsx*.py tests/test_pack.py; do
        [[ -f $f ]] && files+=("$f")
    done
    [[ ${#files[@]} -gt 0 ]] || { echo "none of tests/test_posix.py, test_cli.py, test_fsx*.py exist" >&2; return 1; }
    local logs=$WORK/sanitizer
    mkdir -p "$logs"
    local rc=0
    SQUEEZEFS_BIN=$ROOT/build-asan/squeezefs SQZ_ASAN=1 SQZ_QUICK=1 \
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1:log_path=$logs/asan \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan \
    LSAN_OPTIONS=log_path=$logs/lsan \
        run_pytest "$ASAN_PYTEST_TIMEOUT" "${files[@]}" --basetemp="$WORK/pytest-asan" \
        "${EXTRA_PYTEST[@]}" || rc=$?
    show_reports "$logs" || [[ $rc -ne 0 ]] || rc=1
    return "$rc"
}

# The TSan daemon under the concurrency, stress, integrity, tiering,
# small-file and packed-file suites (SQZ_QUICK=1: of the integrity and
# packed-file tests their SANITIZER_SUBSET; with
# --long also the POSIX and fault suites). Any TSan report fails the stage.
st_pytest_tsan() {
    [[ -x build-tsan/squeezefs ]] || { echo "build-tsan/squeezefs missing: the build failed" >&2; return 1; }
    local files=(tests/test_concurrency.py tests/test_stress.py tests/test_integrity.py tests/test_tier.py tests/test_smallfiles.py tests/test_pack.py)
    [[ $LONG -eq 1 ]] && files+=(tests/test_posix.py tests/test_faults.py)
    local logs=$WORK/tsan rc=0
    mkdir -p "$logs"
    SQUEEZEFS_BIN=$ROOT/build-tsan/squeezefs SQZ_QUICK=1 \
    TSAN_OPTIONS=$TSAN_OPTS_BASE:log_path=$logs/tsan \
        run_pytest "$TSAN_PYTEST_TIMEOUT" "${files[@]}" --basetemp="$WORK/pytest-tsan" \
        "${EXTRA_PYTEST[@]}" || rc=$?
    show_reports "$logs" || [[ $rc -ne 0 ]] || rc=1
    return "$rc"
}

FUZZERS=(container codec policy options)

st_fuzz_build() {
    if ! command -v clang >/dev/null 2>&1; then
        echo "clang not found: fuzzing skipped" >&2
        return 77
    fi
    local targets=() t
    for t in "${FUZZERS[@]}"; do targets+=("tests/fuzz/fuzz_$t"); done
    # Libraries with ASan/UBSan too, so the fuzzers see memory errors in them.
    # Only the fuzz targets are built (other executables would need the
    # fuzzer runtime); clang warnings are not fatal here (gcc builds gate).
    CC=clang NINJA_TARGETS="${targets[*]}" bash tools/build.sh build-fuzz \
        -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false -Dwerror=false
}

st_fuzz() {
    local t=$1
    local exe=build-fuzz/tests/fuzz/fuzz_$t
    if ! command -v clang >/dev/null 2>&1; then
        echo "clang not found: skipped" >&2
        return 77
    fi
    [[ -x $exe ]] || { echo "$exe missing: the fuzz build failed" >&2; return 1; }
    local corpus=$WORK/corpus-$t art=$WORK/artifacts-$t log=$WORK/fuzz-$t.log
    mkdir -p "$corpus" "$art"
    if [[ -d tests/corpus/$t ]]; then
        cp -r "tests/corpus/$t/." "$corpus/"
    else
        echo "note: no seed corpus tests/corpus/$t" >&2
    fi
    local dict=()
    [[ -f tests/fuzz/fuzz_$t.dict ]] && dict=(-dict="tests/fuzz/fuzz_$t.dict")
    echo "fuzz_$t: ${FUZZ_SECONDS}s on a copy of tests/corpus/$t ($(find "$corpus" -type f | wc -l) inputs)"
    local rc=0
    timeout -k 30 $((FUZZ_SECONDS + 300)) "$exe" -max_total_time="$FUZZ_SECONDS" \
        -print_final_stats=1 -timeout=25 -rss_limit_mb=3072 -artifact_prefix="$art/" \
        "${dict[@]}" "$corpus" >"$log" 2>&1 || rc=$?
    local execs
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    [[ -n $execs ]] || execs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
    echo "fuzz_$t: ${execs:-?} executions, corpus now $(find "$corpus" -type f | wc -l) inputs, exit $rc"
    if [[ $rc -ne 0 ]]; then
        tail -n 80 "$log" >&2
        local a
        for a in "$art"/*; do
            [[ -e $a ]] || continue
            mkdir -p build-fuzz/artifacts
            cp "$a" build-fuzz/artifacts/
            echo "crashing input saved: build-fuzz/artifacts/$(basename "$a") (reproduce: $exe build-fuzz/artifacts/$(basename "$a"))" >&2
        done
        return 1
    fi
    tail -n 3 "$log"
}

# The targets are fuzzed side by side, one per core (each is one process,
# and -max_total_time is wall time: more at once than cores would fuzz
# each less): FUZZ_SECONDS each, in waves of $(nproc) targets. Each target
# is still a stage of its own; its output follows when its wave is done.
fuzz_wave() {
    local t t0=$SECONDS
    echo
    echo "=================== [fuzz] $* side by side ($(date +%H:%M:%S))"
    for t in "$@"; do
        ( set +e; ( set -euo pipefail; st_fuzz "$t" ) >"$WORK/fuzz-$t.out" 2>&1
          echo $? >"$WORK/fuzz-$t.rc" ) &
    done
    wait
    echo "=================== [fuzz] $* done in $(fmt_time $((SECONDS - t0)))"
    for t in "$@"; do run_stage "fuzz-$t" fuzz_result "$t"; done
}
fuzz_result() { cat "$WORK/fuzz-$1.out"; return "$(cat "$WORK/fuzz-$1.rc")"; }
run_fuzzers() {
    local n wave=() t
    n=$(nproc)
    for t in "${FUZZERS[@]}"; do
        wave+=("$t")
        if [[ ${#wave[@]} -ge $n ]]; then fuzz_wave "${wave[@]}"; wave=(); fi
    done
    [[ ${#wave[@]} -eq 0 ]] || fuzz_wave "${wave[@]}"
}

# ---------------------------------------------------------------- run
echo "test.sh: $(nproc) cores, long=$LONG quick=$QUICK, fuzz ${FUZZ_SECONDS}s/target, work dir $WORK"
if [[ $INSTALL -eq 1 ]]; then
    run_stage deps st_deps
else
    SKIPPED+=(deps)
fi
run_stage build st_build
if [[ $QUICK -eq 0 ]]; then
    run_stage build-asan st_build_asan
    run_stage build-tsan st_build_tsan
fi
run_stage unit st_unit build
if [[ $QUICK -eq 0 ]]; then
    run_stage unit-asan st_unit build-asan
    run_stage unit-tsan st_unit_tsan
fi
run_stage pytest st_pytest
if [[ $QUICK -eq 0 ]]; then
    run_stage pytest-asan st_pytest_asan
    run_stage pytest-tsan st_pytest_tsan
    run_stage fuzz-build st_fuzz_build
    if failed_stage fuzz-build; then
        for t in "${FUZZERS[@]}"; do
            echo "[fuzz-$t] not run: fuzz-build failed"; FAILED+=("fuzz-$t")
        done
    else
        run_fuzzers
    fi
else
    SKIPPED+=(build-asan build-tsan unit-asan unit-tsan pytest-asan pytest-tsan fuzz-build)
fi

echo
total=$((SECONDS - T_START))
[[ ${#PASSED[@]} -eq 0 ]] || echo "passed:  ${PASSED[*]}"
[[ ${#SKIPPED[@]} -eq 0 ]] || echo "skipped: ${SKIPPED[*]}"
[[ ${#FAILED[@]} -eq 0 ]] || echo "FAILED:  ${FAILED[*]}"
echo "test.sh: ${#PASSED[@]} stages passed, ${#FAILED[@]} failed, ${#SKIPPED[@]} skipped in $(fmt_time $total)"
[[ ${#FAILED[@]} -eq 0 ]]
