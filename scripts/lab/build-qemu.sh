#!/usr/bin/env bash
# Builds QEMU 7.2 (Debian bookworm's source package, the version of the lab's
# qemu-system-x86 package) with AVIC emulated in TCG's SVM, once, into
# $CACHE/qemu-7.2/STAMP/bin/qemu-system-x86_64, for the AMD lab's AVIC pass
# (`cargo xtask lab avic`; docs/lab.md, "AVIC"). Only the x86_64-softmmu
# target, no optional features, no debug information, and only the devices
# of the lab's machine (scripts/lab/qemu-7.2-devices.mak): CI builds it
# cold. The firmware comes from the system's qemu-system-data and seabios
# packages. The patches of
# scripts/lab/qemu-7.2.series are applied in that order (each made on top
# of the ones before it; a patch file the series does not name is an error).
# The build tree is kept ($CACHE/qemu-7.2/tree): a later build with other
# patches copies over it only the files whose contents changed, so ninja
# rebuilds what the change touched, not all ~1400 steps (--force starts
# from scratch).
# Usage: scripts/lab/build-qemu.sh [--force]     prints the binary's path
# Environment: IPIVMM_LAB_CACHE (default ~/.cache/ipivmm-lab), QEMU_JOBS (ninja -j, 2),
# QEMU_PATCHES=none (bookworm's QEMU as it is) or NAME[,NAME] (only these
# patches, in series order: a prefix of the series builds, e.g.
# svm-exitintinfo-type,svm-avic-vmcb). Every build lands in
# $CACHE/qemu-7.2/<hash of its patches' diffs and configure flags>/.
set -euo pipefail
BUILD_NAME=qemu-build
# shellcheck source-path=SCRIPTDIR source=build-common.sh
. "$(dirname "$0")/build-common.sh"
series_patches qemu-7.2 "${QEMU_PATCHES:-}"
FIRMWARE=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu
# No -g (--disable-debug-info): the same code, built in less time; gdb on
# the emulator wants QEMU_DEBUG_INFO=1.
DEVICES=$LAB/qemu-7.2-devices.mak
CONFIGURE=(--target-list=x86_64-softmmu --without-default-features --enable-tcg
    --without-default-devices --with-devices-x86_64=ipivmm-lab
    --disable-docs --disable-werror --disable-user --disable-tools --disable-guest-agent
    "--firmwarepath=$FIRMWARE")
[ "${QEMU_DEBUG_INFO:-0}" = 1 ] || CONFIGURE+=(--disable-debug-info)
DEVICES_SUM=$(sha256sum <"$DEVICES" | cut -c1-16)
build_dest qemu-7.2 bin/qemu-system-x86_64 "${1:-}" "${CONFIGURE[@]}" "devices=$DEVICES_SUM"

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
apt_need "${need[@]}"

# Bookworm's source package (with Debian's patches: 7.2.x stable updates).
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
deb_src bookworm \
    "deb-src [signed-by=$KEYRING] http://deb.debian.org/debian bookworm main" \
    "deb-src [signed-by=$KEYRING] http://deb.debian.org/debian bookworm-updates main" \
    "deb-src [signed-by=$KEYRING] http://deb.debian.org/debian-security bookworm-security main"
fetch_source qemu bookworm 'qemu_7.2*.dsc'
DSC=$(printf '%s\n' "$CACHE"/src/qemu_7.2*.dsc | sort -V | tail -n 1)
build_dir
log "unpacking $(basename "$DSC") with Debian's patches"
dpkg-source --no-check -x "$DSC" "$BUILD/src" >"$BUILD/unpack.log" 2>&1 ||
    { tail -n 20 "$BUILD/unpack.log" >&2; die "dpkg-source -x failed"; }
apply_patches "$BUILD/src"
cp "$DEVICES" "$BUILD/src/configs/devices/x86_64-softmmu/ipivmm-lab.mak"

# The kept tree: one build at a time; a new source package or other
# configure flags (or --force) start it afresh.
TREE=$CACHE/qemu-7.2/tree
mkdir -p "$CACHE/qemu-7.2"
exec 9>"$CACHE/qemu-7.2/tree.lock"
flock 9
KEY="$(basename "$DSC") ${CONFIGURE[*]} devices=$DEVICES_SUM"
if [ "${1:-}" = --force ] || [ "$(cat "$TREE/key" 2>/dev/null)" != "$KEY" ]; then
    rm -rf "$TREE"
    mkdir -p "$TREE/obj"
    mv "$BUILD/src" "$TREE/src"
    log "configuring (x86_64-softmmu, TCG, no optional features, the lab's devices)"
    (cd "$TREE/obj" && ../src/configure "${CONFIGURE[@]}" >"$TREE/configure.log" 2>&1) ||
        { tail -n 30 "$TREE/configure.log" >&2; rm -rf "$TREE"; die "configure failed"; }
    echo "$KEY" >"$TREE/key"
    log "building qemu-system-x86_64 from scratch (nice, -j${QEMU_JOBS:-2}; 1214 steps, ~7 min on 2 cores)"
else
    # Only files a patch touches (this time or last) can differ from the
    # kept tree: copy those that do (a new mtime: ninja rebuilds them).
    changed=0
    while read -r f; do
        if [ -e "$BUILD/src/$f" ]; then
            cmp -s "$BUILD/src/$f" "$TREE/src/$f" && continue
            mkdir -p "$(dirname "$TREE/src/$f")"
            cp "$BUILD/src/$f" "$TREE/src/$f"
        else
            [ -e "$TREE/src/$f" ] || continue
            rm -f "$TREE/src/$f"
        fi
        changed=$((changed + 1))
    done < <(sort -u "$TREE/patched" <(patched_files))
    log "building qemu-system-x86_64 on the kept tree ($changed files changed; nice, -j${QEMU_JOBS:-2})"
fi
patched_files >"$TREE/patched"
(cd "$TREE/obj" && nice -n 10 ninja -j"${QEMU_JOBS:-2}" qemu-system-x86_64 >"$TREE/make.log" 2>&1) ||
    { grep -E 'error|FAILED' -A3 "$TREE/make.log" | head -n 40 >&2; die "build failed"; }
rm -rf "$DEST"
mkdir -p "$DEST/bin"
cp "$TREE/obj/qemu-system-x86_64" "$DEST/bin/"
finish "$DSC"
log "built $DEST/bin/qemu-system-x86_64"
echo "$DEST/bin/qemu-system-x86_64"
