#!/usr/bin/env bash
# The README's test command: the whole workspace's tests, every test binary
# run even when one fails (--no-fail-fast), libtest's output as it comes,
# then a summary over all binaries, whose last line is the plain count:
#   tests: 31 binaries (0 did not finish), 3 ignored; exit 0
#   tests: 1021 passed, 0 failed, 12 skipped
# Skipped tests are what the testkit's `SKIPPED N tests of BINARY` lines
# sum to (libtest counts them as passed; here they are counted apart). Extra arguments go to `cargo test`
# (e.g. `scripts/test.sh -p ipivmm-tests`). The exit status is cargo's.
set -u -o pipefail
cd "$(dirname "$0")/.."

log=$(mktemp "${TMPDIR:-/tmp}/ipivmm-test.XXXXXX")
trap 'rm -f "$log"' EXIT

cargo test --workspace --release --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# libtest: "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 3 filtered out; ..."
# cargo:   "     Running tests/pingpong.rs (target/release/deps/pingpong-...)", "   Doc-tests ipivmm"
awk -v status="$status" '
    /^test result: / {
        results++
        for (i = 1; i <= NF; i++) {
            n = $(i - 1) + 0
            if ($i ~ /^passed;?$/) passed += n
            else if ($i ~ /^failed;?$/) failed += n
            else if ($i ~ /^ignored;?$/) ignored += n
        }
    }
    /^ *Running / || /^ *Doc-tests / { binaries++ }
    # testkit: "SKIPPED 3 tests of pingpong (counted as passed above): ..."
    # at the exit of each binary (its "SKIP <test>" lines may interleave with
    # libtest output; this one comes alone).
    match($0, /SKIPPED [0-9]+ tests? of /) {
        split(substr($0, RSTART, RLENGTH), w, " ")
        skipped += w[2]
    }
    END {
        unfinished = binaries - results
        if (unfinished < 0) unfinished = 0
        # The last line is the plain "N passed, N failed, N skipped" a
        # CI reads; the detail goes on the line before it.
        printf "tests: %d binaries (%d did not finish), %d ignored; exit %d\n",
            binaries, unfinished, ignored, status
        printf "tests: %d passed, %d failed, %d skipped\n", passed - skipped, failed, skipped
    }
' "$log"
exit "$status"
