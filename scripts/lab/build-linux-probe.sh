#!/usr/bin/env bash
# Packs the Linux pass's archive for the lab's guest (docs/linux-guest.md):
# scripts/lab/probe-linux.sh as /lab/extra.sh, the L2 kernel (the lab's
# Debian package's bzImage, RELEASE) as /lab/linux/vmlinuz and ipivmm's
# guest initramfs (guest-linux/build-initrd.sh, its module built for the
# same RELEASE) as /lab/linux/initrd.cpio.gz. Prints the archive's path.
# Usage: scripts/lab/build-linux-probe.sh OUT.cpio
# Environment: RELEASE (default 6.1.0-50-amd64), IPIVMM_LAB_CACHE.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# = 1 ] || { echo "usage: $0 OUT.cpio" >&2; exit 2; }
OUTFILE=$(realpath -m "$1")
export RELEASE=${RELEASE:-6.1.0-50-amd64}
LAB=${IPIVMM_LAB_CACHE:-$HOME/.cache/ipivmm-lab}
CACHE=$LAB/linux-guest
initrd=$(guest-linux/build-initrd.sh "$PWD/target/linux-guest/initrd-$RELEASE.cpio.gz" | tail -n 1)
img=$CACHE/image-$RELEASE
# The lab's own unpacked kernel package (its fetch step) when it is that release.
lab_img=$(ls -d "$LAB/root/linux-image-${RELEASE}_"* 2>/dev/null | tail -n 1 || true)
[ -n "$lab_img" ] && [ -e "$lab_img/boot/vmlinuz-$RELEASE" ] && img=$lab_img
if [ ! -e "$img/boot/vmlinuz-$RELEASE" ]; then
    mkdir -p "$CACHE/debs"
    deb=$(ls "$CACHE/debs/linux-image-${RELEASE}_"*.deb 2>/dev/null | tail -n 1 || true)
    if [ -z "$deb" ]; then
        (cd "$CACHE/debs" && apt-get download -qq "linux-image-$RELEASE" >/dev/null 2>&1) ||
            { echo "apt-get download linux-image-$RELEASE failed" >&2; exit 1; }
        deb=$(ls "$CACHE/debs/linux-image-${RELEASE}_"*.deb | tail -n 1)
    fi
    rm -rf "$img"
    mkdir -p "$img"
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$img" "./boot/vmlinuz-$RELEASE"
fi
st=$(mktemp -d)
trap 'rm -rf "$st"' EXIT
mkdir -p "$st/lab/linux"
install -m 755 scripts/lab/probe-linux.sh "$st/lab/extra.sh"
cp "$img/boot/vmlinuz-$RELEASE" "$st/lab/linux/vmlinuz"
cp "$initrd" "$st/lab/linux/initrd.cpio.gz"
BUSYBOX=$PWD/target/linux-guest/build/root/bin/busybox
mkdir -p "$(dirname "$OUTFILE")"
(cd "$st" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null) >"$OUTFILE"
echo "$OUTFILE"
