#!/usr/bin/env bash
# Builds the APIC/IPI KVM selftests (Debian bookworm's linux-source-6.1, statically
# linked) as a peer of ipivmm in the lab's guest, and packs them with a probe
# script into an initramfs archive to append (cargo xtask lab --emulator bochs --cpio):
# /lab/selftests/* and /lab/extra.sh, which the guest runs as step `extra`
# (kernel argument lab.steps=...,extra).
# Usage: scripts/lab/build-selftests.sh PROBE_SCRIPT OUT.cpio
#   PROBE_SCRIPT   a busybox sh script, installed as /lab/extra.sh
#                  (e.g. scripts/lab/probe-apicv.sh)
# Environment: IPIVMM_LAB_CACHE (default ~/.cache/ipivmm-lab), SELFTESTS (the
# tests to build, paths under tools/testing/selftests/kvm; default the list below).
set -euo pipefail
CACHE=${IPIVMM_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipivmm-lab}
# The APIC and IPI tests of tools/testing/selftests/kvm/x86_64 (6.1) and two
# plain ones: xapic_ipi_test (xAPIC fixed IPIs to a halted vCPU: the ICR
# writes IPIv virtualizes), xapic_state_test (xAPIC and x2APIC register and
# ICR round trips, IPIs to vCPUs that exist and that do not), smm_test (an
# x2APIC SMI to self: an ICR write IPIv must not virtualize), debug_regs (an
# x2APIC fixed self-IPI by shorthand), kvm_pv_test (KVM_HC_SEND_IPI among the
# PV features), ucna_injection_test (an xAPIC LVT interrupt and its EOI).
TESTS=${SELFTESTS:-"x86_64/xapic_ipi_test x86_64/xapic_state_test x86_64/smm_test x86_64/debug_regs
    x86_64/kvm_pv_test x86_64/ucna_injection_test x86_64/sync_regs_test x86_64/userspace_io_test"}
die() { echo "selftests: error: $*" >&2; exit 2; }
[ $# = 2 ] || die "usage: $0 PROBE_SCRIPT OUT.cpio"
PROBE=$(realpath "$1")
OUTFILE=$(realpath -m "$2")
mkdir -p "$(dirname "$OUTFILE")"
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
# newc archives: the host's cpio, else the lab's busybox (scripts/lab.sh
# fetches it), else cpio installed (a fresh clone has neither).
if command -v cpio >/dev/null; then
    CPIO=(cpio)
else
    BUSYBOX=$(ls "$CACHE"/root/busybox-static_*/bin/busybox 2>/dev/null | head -n 1 || true)
    if [ -x "$BUSYBOX" ]; then
        CPIO=("$BUSYBOX" cpio)
    else
        [ "$(id -u)" = 0 ] || die "need cpio (apt-get install cpio)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cpio >/dev/null 2>&1 ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cpio >/dev/null; } ||
            die "apt-get install cpio failed"
        CPIO=(cpio)
    fi
fi
st=$(mktemp -d)
trap 'rm -rf "$st"' EXIT
mkdir -p "$st/lab/selftests"
for t in "${targets[@]}"; do cp "$t" "$st/lab/selftests/"; done
cp "$PROBE" "$st/lab/extra.sh"
chmod +x "$st/lab/extra.sh"
(cd "$st" && find . | "${CPIO[@]}" -o -H newc 2>/dev/null) >"$OUTFILE"
echo "$OUTFILE"
