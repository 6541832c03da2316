#!/usr/bin/env bash
# Runs the bats suite (tests/*.bats) serially: the tests measure concurrency
# with real servers and clients, and running files side by side on two
# cores would only add noise (bats' --jobs also needs GNU parallel).
#
#   scripts/run-tests.sh                 every file
#   scripts/run-tests.sh tests/caps.bats one file (extra args go to bats)
#
# Expects `make all` and the test programs (make build/tests/NAME) built;
# `make test` does both.
set -euo pipefail
cd "$(dirname "$0")/.."

export BATS_LIB_PATH=${BATS_LIB_PATH:-/usr/lib/bats}
# A hung test fails on its own instead of eating CI's time.
export BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-120}

missing=0
for f in build/libbulkhead.so build/tests/connect_hold build/tests/mt_client \
    build/tests/fdops build/tests/resolve_connect build/tests/vfork_hold \
    build/tests/exit_hold build/tests/exec_altstack build/tests/thread_storm build/tests/nb_connect \
    build/tests/nb_learn; do
    if [[ ! -e "$f" ]]; then
        echo "run-tests: missing $f (run: make all \$(TEST_BIN), or make test)" >&2
        missing=1
    fi
done
((missing == 0)) || exit 1

if (($# == 0)); then
    set -- tests/*.bats
fi

mkdir -p build
set +e
bats --tap "$@" | tee build/test-output.tap
status=${PIPESTATUS[0]}
set -e

# A plain closing line that any CI log reader understands.
read -r passed failed skipped < <(awk '
    /^ok / { if ($0 ~ /# skip/) s++; else p++ }
    /^not ok / { f++ }
    END { print p + 0, f + 0, s + 0 }' build/test-output.tap)
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
if ((status == 0 && failed > 0)); then
    status=1
fi
exit "$status"
