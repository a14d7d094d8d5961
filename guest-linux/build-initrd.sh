#!/usr/bin/env bash
# Builds ipivmm's Linux guest initramfs (docs/linux-guest.md) from Debian
# packages: busybox-static, the IPI module (built against the kernel's
# linux-headers), the phase tool and the workloads (gcc -static),
# rt-tests' hackbench with the libraries ldd names, and guest-linux/init.
# Prints the initramfs's path (a gzip'd newc cpio) on its last line.
#
# Usage: guest-linux/build-initrd.sh [OUT]
#   OUT        the initramfs to write (default target/linux-guest/initrd.cpio.gz)
# Environment:
#   RELEASE    the guest kernel's release the module is built for
#              (default 6.1.0-50-amd64, the lab's; its linux-headers-RELEASE
#              must be in the system's apt sources)
#   IPIVMM_LAB_CACHE   the cache (default ~/.cache/ipivmm-lab): packages and
#              unpacked headers under linux-guest/
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RELEASE=${RELEASE:-6.1.0-50-amd64}
OUT=${1:-$ROOT/target/linux-guest/initrd.cpio.gz}
CACHE=${IPIVMM_LAB_CACHE:-$HOME/.cache/ipivmm-lab}/linux-guest
DEBS=$CACHE/debs
say() { echo "build-initrd: $*" >&2; }
die() { say "$*"; exit 1; }
for tool in gcc make dpkg-deb apt-get gzip ldd; do
    command -v "$tool" >/dev/null || die "needs $tool (apt-get install gcc make dpkg libc-bin gzip)"
done
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || die "needs a static libc (apt-get install libc6-dev)"

# Packages, cached: a name matches its .deb whatever the version.
mkdir -p "$DEBS"
fetch() {
    local pkg=$1
    ls "$DEBS/${pkg}_"*.deb >/dev/null 2>&1 && return 0
    say "downloading $pkg"
    (cd "$DEBS" && apt-get download -qq "$pkg" >/dev/null 2>&1) ||
        { apt-get update -qq >/dev/null 2>&1 && (cd "$DEBS" && apt-get download -qq "$pkg" >/dev/null 2>&1); } ||
        die "apt-get download $pkg failed"
}
deb() { ls "$DEBS/${1}_"*.deb | sort -V | tail -n 1; }
fetch busybox-static
fetch rt-tests
fetch "linux-headers-$RELEASE"
common=$(dpkg-deb -f "$(deb "linux-headers-$RELEASE")" Depends | tr ',' '\n' |
    sed -n 's/^ *\(linux-headers-[^ ]*-common[^ ]*\).*/\1/p' | head -n 1)
kbuild=$(dpkg-deb -f "$(deb "linux-headers-$RELEASE")" Depends | tr ',' '\n' |
    sed -n 's/^ *\(linux-kbuild-[^ ]*\).*/\1/p' | head -n 1)
[ -n "$common" ] && [ -n "$kbuild" ] || die "linux-headers-$RELEASE names no -common or kbuild package"
fetch "$common"
fetch "$kbuild"

# The headers, unpacked once; their Makefile's absolute include made local.
HDR=$CACHE/headers-$RELEASE
KDIR=$HDR/usr/src/linux-headers-$RELEASE
if [ ! -e "$KDIR/.ipivmm-ready" ]; then
    rm -rf "$HDR"
    mkdir -p "$HDR"
    for p in "linux-headers-$RELEASE" "$common" "$kbuild"; do dpkg-deb -x "$(deb "$p")" "$HDR"; done
    sed -i "s|include /usr/src/|include $HDR/usr/src/|" "$KDIR/Makefile"
    touch "$KDIR/.ipivmm-ready"
fi

WORK=$ROOT/target/linux-guest/build
rm -rf "$WORK"
mkdir -p "$WORK/module" "$WORK/root"/{bin,lib,lib64,usr/bin,proc,sys,dev,tmp}
R=$WORK/root

say "IPI module for $RELEASE"
cp guest-linux/ipi-module/ipivmm_ipi.c guest-linux/ipi-module/Makefile "$WORK/module/"
make -s -C "$KDIR" M="$WORK/module" modules >"$WORK/module.log" 2>&1 ||
    { cat "$WORK/module.log" >&2; die "the IPI module did not build against linux-headers-$RELEASE"; }
cp "$WORK/module/ipivmm_ipi.ko" "$R/lib/"

say "phase tool and workloads (gcc -static)"
cflags=(-O2 -Wall -Wextra -Werror -static)
gcc "${cflags[@]}" -o "$R/bin/ipivmm-guest" guest-linux/ipivmm-guest.c
gcc "${cflags[@]}" -pthread -o "$R/bin/tlb-shootdown" guest-linux/tlb-shootdown.c
gcc "${cflags[@]}" -pthread -o "$R/bin/ebizzy-lite" guest-linux/ebizzy-lite.c
install -m 755 guest-linux/hackbench-run "$R/bin/"
install -m 755 guest-linux/init "$R/init"

say "busybox, hackbench"
dpkg-deb -x "$(deb busybox-static)" "$WORK/busybox"
install -m 755 "$WORK/busybox/bin/busybox" "$R/bin/busybox"
dpkg-deb -x "$(deb rt-tests)" "$WORK/rt-tests"
install -m 755 "$WORK/rt-tests/usr/bin/hackbench" "$R/usr/bin/"
# The libraries hackbench links, from this (Debian) system.
ldd "$R/usr/bin/hackbench" | grep -o '/[^ ]*' | while read -r lib; do
    install -D -m 755 "$lib" "$R$lib"
done

say "packing"
mkdir -p "$(dirname "$OUT")"
(cd "$R" && find . | sort | "$R/bin/busybox" cpio -o -H newc 2>/dev/null) | gzip -9 >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
say "$(du -h "$OUT" | cut -f1) for $RELEASE: ipivmm-guest, ipivmm_ipi.ko, hackbench, tlb-shootdown, ebizzy-lite"
echo "$OUT"
