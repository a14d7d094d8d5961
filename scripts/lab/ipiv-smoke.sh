#!/usr/bin/env bash
# The IPIv smoke in one command (docs/lab-intel.md, "In CI"): kvm_intel under
# the patched Bochs, an x2APIC unicast ping-pong with enable_ipiv=Y (0
# ICR-write exits per IPI) and after a reload with enable_ipiv=N (1). What
# `ipivmm host` and the presets name where a host has no IPIv or APICv.
# Extra arguments go to `cargo xtask lab` (e.g. --timeout 4800).
set -euo pipefail
cd "$(dirname "$0")/../.."
smoke=$(scripts/lab/build-ipiv-smoke.sh target/lab-bochs/ipiv-smoke.cpio)
exec cargo xtask lab quick --emulator bochs --bochs 3.0 --steps host,extra --no-test-binaries \
    --cpio "$smoke" --timeout 2400 --results target/lab-bochs/results-ipiv-smoke "$@"
