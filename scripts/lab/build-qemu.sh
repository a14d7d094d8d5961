#!/usr/bin/env bash
# Builds QEMU 7.2 (Debian bookworm's source package, the version of the lab's
# qemu-system-x86 package) with AVIC emulated in TCG's SVM, once, into
# $CACHE/qemu-7.2/STAMP/bin/qemu-system-x86_64, for the AMD lab's AVIC pass
# (scripts/lab/avic.sh; docs/lab.md, "AVIC"). Only the x86_64-softmmu
# target, no optional features; the firmware comes from the system's
# qemu-system-data and seabios packages. The patches of
# scripts/lab/qemu-7.2.series are applied in that order (each made on top
# of the ones before it; a patch file the series does not name is an error).
# Usage: scripts/lab/build-qemu.sh [--force]     prints the binary's path
# Environment: IPIVMM_LAB_CACHE (default ~/.cache/ipivmm-lab), QEMU_JOBS (ninja -j, 2),
# QEMU_PATCHES=none (bookworm's QEMU as it is) or NAME[,NAME] (only these
# patches, in series order: a prefix of the series builds, e.g.
# svm-exitintinfo-type,svm-avic-vmcb). Every build lands in
# $CACHE/qemu-7.2/<hash of its patches' diffs and configure flags>/.
set -euo pipefail
CACHE=${IPIVMM_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipivmm-lab}
log() { echo "qemu-build: $*" >&2; }
die() { echo "qemu-build: error: $*" >&2; exit 2; }
LAB=$(cd "$(dirname "$0")" && pwd)
SERIES=()
while read -r n; do
    n=${n%%#*}
    n=${n//[[:space:]]/}
    [ -z "$n" ] || SERIES+=("$n")
done <"$LAB/qemu-7.2.series"
for f in "$LAB"/qemu-7.2-*.patch; do
    [ -e "$f" ] || continue
    n=${f##*/qemu-7.2-}
    n=${n%.patch}
    case " ${SERIES[*]} " in *" $n "*) ;; *) die "$f is not in $LAB/qemu-7.2.series" ;; esac
done
WANT=" ${SERIES[*]} "
if [ "${QEMU_PATCHES:-}" = none ]; then
    WANT=" "
elif [ -n "${QEMU_PATCHES:-}" ]; then
    WANT=" ${QEMU_PATCHES//,/ } "
    for n in $WANT; do
        case " ${SERIES[*]} " in *" $n "*) ;; *) die "no patch $n in $LAB/qemu-7.2.series" ;; esac
    done
fi
PATCHES=()
for n in "${SERIES[@]}"; do
    case "$WANT" in *" $n "*) PATCHES+=("$LAB/qemu-7.2-$n.patch") ;; esac
done
FIRMWARE=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu
CONFIGURE=(--target-list=x86_64-softmmu --without-default-features --enable-tcg
    --disable-docs --disable-werror --disable-user --disable-tools --disable-guest-agent
    "--firmwarepath=$FIRMWARE")
# The stamp covers the diffs, not the headers (descriptions change without
# changing QEMU).
STAMP=$({ for p in "${PATCHES[@]}"; do sed -n '/^--- /,$p' "$p"; done; echo "${CONFIGURE[*]}"; } | sha256sum | cut -c1-16)
DEST=$CACHE/qemu-7.2/$STAMP
[ "${1:-}" = --force ] && rm -rf "$DEST"
if [ -x "$DEST/bin/qemu-system-x86_64" ] && [ "$(cat "$DEST/.done" 2>/dev/null)" = "$STAMP" ]; then
    echo "$DEST/bin/qemu-system-x86_64"
    exit 0
fi

need=()
for c in gcc:build-essential make:build-essential patch:patch ninja:ninja-build meson:meson \
    pkg-config:pkg-config dpkg-source:dpkg-dev python3:python3; do
    command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
done
pkg-config --exists glib-2.0 2>/dev/null || need+=(libglib2.0-dev)
pkg-config --exists pixman-1 2>/dev/null || need+=(libpixman-1-dev)
pkg-config --exists zlib 2>/dev/null || need+=(zlib1g-dev)
[ -e /usr/include/libfdt.h ] || need+=(libfdt-dev)
# The BIOS and option ROMs the built binary loads (--firmwarepath).
[ -e /usr/share/seabios/bios-256k.bin ] || need+=(qemu-system-data seabios)
if [ ${#need[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "need $(printf '%s\n' "${need[@]}" | sort -u | tr '\n' ' ')installed"
    log "installing $(printf '%s\n' "${need[@]}" | sort -u | tr '\n' ' ')"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null 2>&1 ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null; } ||
        die "apt-get install failed"
fi

# Bookworm's source package (with Debian's patches: 7.2.x stable updates)
# through a private apt configuration: the system's sources stay as they are.
APT=$CACHE/bookworm-apt
mkdir -p "$APT/lists/partial" "$CACHE/src"
{
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-updates main"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main"
} >"$APT/sources.list"
aptx() { apt-get -q -o Dir::Etc::sourcelist="$APT/sources.list" -o Dir::Etc::sourceparts=- \
    -o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT/cache" "$@"; }
if ! ls "$CACHE"/src/qemu_7.2*.dsc >/dev/null 2>&1; then
    log "fetching the qemu source package from Debian bookworm"
    aptx update >/dev/null 2>&1 || die "apt-get update (bookworm deb-src) failed"
    (cd "$CACHE/src" && aptx source --download-only qemu >/dev/null 2>&1) || true
    ls "$CACHE"/src/qemu_7.2*.dsc >/dev/null 2>&1 || die "could not download the qemu 7.2 sources from bookworm"
fi
DSC=$(ls "$CACHE"/src/qemu_7.2*.dsc | sort -V | tail -n 1)
BUILD=$(mktemp -d "${TMPDIR:-/tmp}/qemu-build.XXXXXX")
trap 'rm -rf "$BUILD"' EXIT
log "unpacking $(basename "$DSC") with Debian's patches"
dpkg-source --no-check -x "$DSC" "$BUILD/src" >"$BUILD/unpack.log" 2>&1 ||
    { tail -n 20 "$BUILD/unpack.log" >&2; die "dpkg-source -x failed"; }
for p in "${PATCHES[@]}"; do
    log "applying $(basename "$p")"
    patch -d "$BUILD/src" -p1 -s <"$p" || die "$(basename "$p") does not apply"
done
mkdir "$BUILD/obj"
log "configuring (x86_64-softmmu, TCG, no optional features)"
(cd "$BUILD/obj" && ../src/configure "${CONFIGURE[@]}" >"$BUILD/configure.log" 2>&1) ||
    { tail -n 30 "$BUILD/configure.log" >&2; die "configure failed"; }
log "building qemu-system-x86_64 (nice, -j${QEMU_JOBS:-2}; ~12 min on 2 cores)"
(cd "$BUILD/obj" && nice -n 10 ninja -j"${QEMU_JOBS:-2}" qemu-system-x86_64 >"$BUILD/make.log" 2>&1) ||
    { grep -E 'error|FAILED' -A3 "$BUILD/make.log" | head -n 40 >&2; die "build failed"; }
rm -rf "$DEST"
mkdir -p "$DEST/bin"
cp "$BUILD/obj/qemu-system-x86_64" "$DEST/bin/"
basename "$DSC" >"$DEST/source.txt"
printf '%s\n' "${PATCHES[@]##*/}" >"$DEST/patches.txt"
echo "$STAMP" >"$DEST/.done"
log "built $DEST/bin/qemu-system-x86_64"
echo "$DEST/bin/qemu-system-x86_64"
