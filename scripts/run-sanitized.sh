#!/usr/bin/env bash
# Runs the unit programs and bats files against a sanitized build; called by
# make test-asan, test-ubsan and test-tsan, which build DIR first.
#
#   scripts/run-sanitized.sh asan|ubsan|tsan DIR [BATS_FILE...]
#
# DIR holds unit/test_* built with the sanitizer, and libbulkhead.so when
# bats files are given. Every
# report goes to DIR/reports/ (log_path), not to the stderr the tests read,
# and any report there at the end fails the run, even from a process whose
# failure no test would notice (a client the test expected to fail anyway).
set -euo pipefail
cd "$(dirname "$0")/.."

san=$1 dir=$(realpath "$2")
shift 2
reports="$dir/reports"
rm -rf "$reports"
mkdir -p "$reports"

# Foreign programs (python3, curl, sh) leak by design: no leak checks there.
case "$san" in
asan)
    export ASAN_OPTIONS="halt_on_error=1:detect_leaks=0:log_path=$reports/asan"
    runtime=libasan.so
    ;;
ubsan)
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan"
    runtime=
    ;;
tsan)
    export TSAN_OPTIONS="halt_on_error=1:log_path=$reports/tsan"
    runtime=
    ;;
*)
    echo "run-sanitized: unknown sanitizer $san" >&2
    exit 2
    ;;
esac

status=0
for t in "$dir"/unit/test_*; do
    echo "== $t"
    # Our own programs free what they allocate: leaks count there.
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:detect_leaks=1}" "$t" || status=1
done

# ASan must be the first object loaded, before the shim: the preload list
# is "RUNTIME SHIM". The helpers check [[ -f "$SHIM" ]] and use "$SHIM"
# only as LD_PRELOAD's value, so the list is made a path that exists too:
# DIR/libasan.so.8 (say) links to the runtime, and the directory
# "DIR/libasan.so.8 " (with its space) holds DIR's own path again, down to
# a link to the shim. The runtime's link keeps its name: ASan checks that
# the first library's name is its own.
if (($# > 0)); then
    shim="$dir/libbulkhead.so"
    if [[ -n "$runtime" ]]; then
        real=$(realpath "$(${CC:-cc} -print-file-name="$runtime")")
        rt="$dir/${real##*/}"
        rt=${rt%.*.*}  # libasan.so.8.0.0 -> libasan.so.8
        ln -sfn "$real" "$rt"
        mkdir -p "$rt $dir"
        ln -sfn "$shim" "$rt $dir/libbulkhead.so"
        shim="$rt $dir/libbulkhead.so"
        [[ -f "$shim" ]] || { echo "run-sanitized: cannot make '$shim'" >&2; exit 1; }
    fi
    BULKHEAD_TEST_SHIM="$shim" scripts/run-tests.sh "$@" || status=1
fi

shopt -s nullglob
found=("$reports"/*)
if ((${#found[@]} > 0)); then
    echo "run-sanitized: ${#found[@]} $san report(s) in $reports:" >&2
    for f in "${found[@]}"; do
        echo "---- $f" >&2
        head -n 60 "$f" >&2
    done
    status=1
fi
exit "$status"
