#!/usr/bin/env bash
# The AVIC pass of the AMD lab: kvm_amd with avic=1 (no force_avic) on QEMU
# TCG's emulated AVIC (docs/lab.md, "AVIC"). Its host side is
# `cargo xtask lab avic` (xtask/src/lab/avic.rs); this keeps the old
# command line:
#   scripts/lab/avic.sh [--parts selftests,matrix,preset] [--iterations N] [--update-docs] ...
# `scripts/lab/avic.sh --help` lists every option.
set -euo pipefail
exec "$(dirname "$0")/../lab.sh" avic "$@"
