#!/usr/bin/env bash
# Builds a few KVM selftests (Debian bookworm's linux-source-6.1, statically
# linked) as a peer of ipivmm in the lab's guest, and packs them with a probe
# script into an initramfs archive to append (scripts/lab/bochs.sh --cpio):
# /lab/selftests/* and /lab/extra.sh, which the guest runs as step `extra`
# (kernel argument lab.steps=...,extra).
# Usage: scripts/lab/build-selftests.sh PROBE_SCRIPT OUT.cpio
#   PROBE_SCRIPT   a busybox sh script, installed as /lab/extra.sh
#                  (e.g. scripts/lab/probe-apicv.sh)
# Environment: IPIVMM_LAB_CACHE (default ~/.cache/ipivmm-lab), SELFTESTS (the
# tests to build, paths under tools/testing/selftests/kvm; default the four above).
set -euo pipefail
CACHE=${IPIVMM_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipivmm-lab}
TESTS=${SELFTESTS:-x86_64/xapic_ipi_test x86_64/xapic_state_test x86_64/sync_regs_test x86_64/userspace_io_test}
die() { echo "selftests: error: $*" >&2; exit 2; }
[ $# = 2 ] || die "usage: $0 PROBE_SCRIPT OUT.cpio"
PROBE=$(realpath "$1")
OUTFILE=$(realpath -m "$2")
SRC=$CACHE/linux-source-6.1
if [ ! -e "$SRC/.done" ]; then
    mkdir -p "$CACHE/src"
    deb=$(ls "$CACHE"/src/linux-source-6.1_*.deb 2>/dev/null | head -n 1 || true)
    if [ -z "$deb" ]; then
        (cd "$CACHE/src" && apt-get download -q linux-source-6.1 >/dev/null 2>&1) ||
            { apt-get update -qq && (cd "$CACHE/src" && apt-get download -q linux-source-6.1 >/dev/null); } ||
            die "apt-get download linux-source-6.1 failed"
        deb=$(ls "$CACHE"/src/linux-source-6.1_*.deb | head -n 1)
    fi
    rm -rf "$SRC"
    mkdir -p "$SRC"
    dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/src/linux-source-6.1.tar.xz | tar -xJ -C "$SRC" --strip-components=1
    (cd "$SRC" && nice -n 10 make -s headers >/dev/null)
    touch "$SRC/.done"
fi
K=$SRC/tools/testing/selftests/kvm
targets=()
for t in $TESTS; do targets+=("$K/$t"); done
nice -n 10 make -s -C "$K" -j2 LDFLAGS="-static -pthread -no-pie" "${targets[@]}" >/dev/null 2>&1 ||
    die "make -C $K failed"
BUSYBOX=$(ls "$CACHE"/root/busybox-static_*/bin/busybox 2>/dev/null | head -n 1)
[ -x "$BUSYBOX" ] || die "no busybox in $CACHE (scripts/lab.sh initrd fetches it)"
st=$(mktemp -d)
trap 'rm -rf "$st"' EXIT
mkdir -p "$st/lab/selftests"
for t in "${targets[@]}"; do cp "$t" "$st/lab/selftests/"; done
cp "$PROBE" "$st/lab/extra.sh"
chmod +x "$st/lab/extra.sh"
(cd "$st" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null) >"$OUTFILE"
echo "$OUTFILE"
