#!/usr/bin/env bash
# Rebuilds the BPF exit counter shipped in the tree (counters/bpf/kvm_exits.bpf.o)
# from its source and records what it was built from beside it
# (counters/bpf/kvm_exits.bpf.o.sum: the source's CRC-32, the compiler, the flags).
# counters/build.rs embeds the shipped object, so a build needs no clang; it
# refuses a source that no longer matches the record unless clang can rebuild
# it, and `cargo test -p ipivmm-counters bpf::shipped` checks the record (and,
# with the same clang, that a rebuild is byte-identical).
# Usage: scripts/build-bpf.sh   (needs clang with the BPF target; Debian: clang)
set -euo pipefail
cd "$(dirname "$0")/../counters"
clang=${CLANG:-clang}
# -fdebug-compilation-dir=. keeps the checkout's path out of the object, so
# the same clang builds the same bytes anywhere.
flags="-target bpf -O2 -g -Wall -Werror -fdebug-compilation-dir=."
src=bpf/kvm_exits.bpf.c
obj=bpf/kvm_exits.bpf.o
# shellcheck disable=SC2086
"$clang" $flags -c "$src" -o "$obj.tmp"
mv "$obj.tmp" "$obj"
# gzip's trailer holds the CRC-32 (IEEE) of its input, little-endian.
crc=$(gzip -c <"$src" | tail -c8 | head -c4 | od -An -tx4 | tr -d ' \n')
{
    echo "# What counters/bpf/kvm_exits.bpf.o was built from (scripts/build-bpf.sh writes this)."
    echo "source-crc32 $crc"
    echo "compiler $("$clang" --version | head -n1)"
    echo "flags $flags"
} >"$obj.sum"
echo "built $obj ($(wc -c <"$obj") bytes) from $src (CRC-32 $crc)"
