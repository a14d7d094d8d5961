#!/usr/bin/env bash
# The Intel side of the lab: kvm_intel under Bochs (docs/lab-intel.md). Its
# host side is `cargo xtask lab --emulator bochs` (xtask/src/lab/bochs.rs);
# this keeps the old command line:
#   scripts/lab/bochs.sh [2.7|3.0] [--timeout S] [--cpu MODEL] [--ips N] [--initrd F --kernel F]
#                        [--cpio F]... [--results DIR] [--no-verify] [kernel args...]
# e.g. scripts/lab/bochs.sh 3.0 --cpio probe.cpio lab.steps=host,extra lab.matrix=10
set -euo pipefail
args=(--emulator bochs)
kargs=()
while [ $# -gt 0 ]; do
    case $1 in
    2.7 | 3.0) args+=(--bochs "$1") ;;
    --no-verify | -h | --help) args+=("$1") ;;
    --*) args+=("$1" "${2:?$1 needs a value}"); shift ;;
    *) kargs+=("$1") ;;
    esac
    shift
done
exec "$(dirname "$0")/../lab.sh" "${args[@]}" -- "${kargs[@]}"
