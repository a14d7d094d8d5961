#!/usr/bin/env bash
# The lab: ipivmm on a real hardware-KVM module under an emulated CPU
# (docs/lab.md). Its host side is `cargo xtask lab` (xtask/src/lab/); this
# is the old entry point, with the same arguments:
#   scripts/lab.sh [quick|full|shell|initrd|clean|verify|table] [--steps ...] [--update-docs] ...
# `scripts/lab.sh --help` lists them all.
set -euo pipefail
# `cargo xtask` (.cargo/config.toml) from any directory; relative paths stay
# the caller's.
exec cargo run --quiet --release --manifest-path "$(dirname "$0")/../Cargo.toml" --package xtask -- lab "$@"
