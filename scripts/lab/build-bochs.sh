#!/usr/bin/env bash
# Builds Bochs 3.0 (Debian trixie's source package) for the Intel lab
# (scripts/lab/bochs.sh) once, into $CACHE/bochs-3.0/STAMP/{bin/bochs,share}.
# Bookworm ships only Bochs 2.7 (no posted interrupts, so kvm_intel runs with
# enable_apicv=N); 3.0 emulates APICv (virtual-interrupt delivery, posted
# interrupts). The build is configured without GUI, debugger or plugins, and
# the patches of scripts/lab/bochs-3.0.series are applied (APICv fixes and
# IPI virtualization, docs/lab-intel.md).
# Usage: scripts/lab/build-bochs.sh [--force]     prints the bochs binary's path
# Environment: IPIVMM_LAB_CACHE (default ~/.cache/ipivmm-lab), BOCHS_JOBS (make -j, 2),
# BOCHS_PATCHES=none (build without the patches) or NAME[,NAME] (only these
# patches, still in series order); scripts/lab/bochs.sh passes it through.
# Every build lands in $CACHE/bochs-3.0/<hash of its patches and configure
# flags>/, so checkouts with different patch sets share the cache without
# rebuilding each other's Bochs.
set -euo pipefail
BUILD_NAME=bochs-build
# shellcheck source-path=SCRIPTDIR source=build-common.sh
. "$(dirname "$0")/build-common.sh"
# BOCHS_PATCHES=none: trixie's Bochs as it is (to reproduce the VM-entry
# failure); BOCHS_PATCHES=NAME[,NAME]: only bochs-3.0-NAME.patch (e.g.
# pid-align: to reproduce the hang the vmentry-intr-mask patch fixes).
series_patches bochs-3.0 "${BOCHS_PATCHES:-}"
# --disable-show-ips: the IPS display logs from a SIGALRM handler, which
# deadlocks Bochs (futex, 0% CPU) when the alarm lands inside another log write.
CONFIGURE=(--with-nogui --without-x11 --without-sdl2 --without-wx
    --enable-x86-64 --enable-smp --enable-vmx=2 --enable-svm --enable-avx --enable-evex
    --enable-cpu-level=6 --enable-all-optimizations --enable-pci --disable-plugins
    --disable-debugger --disable-docbook --disable-show-ips)
build_dest bochs-3.0 bin/bochs "${1:-}" "${CONFIGURE[@]}"
need=()
for c in gcc:build-essential g++:build-essential make:build-essential patch:patch; do
    command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
done
apt_need "${need[@]}"

deb_src trixie "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main"
# The .dsc may be refused by a mirror; only the two tarballs are needed.
fetch_source bochs trixie 'bochs_3.*.orig.tar.*'
ORIG=$(printf '%s\n' "$CACHE"/src/bochs_3.*.orig.tar.* | head -n 1)
build_dir
tar -xf "$ORIG" -C "$BUILD"
SRC=$(printf '%s\n' "$BUILD"/bochs-*/ | head -n 1)
apply_patches "$SRC"
log "configuring $(basename "$SRC") (no GUI, VMX level 2 with APICv, SMP, x86-64)"
(cd "$SRC" && ./configure --prefix="$DEST" "${CONFIGURE[@]}" >"$BUILD/configure.log" 2>&1) ||
    { tail -n 30 "$BUILD/configure.log" >&2; die "configure failed"; }
log "building (nice, -j${BOCHS_JOBS:-2}; ~5 min on 2 cores)"
(cd "$SRC" && nice -n 10 make -j"${BOCHS_JOBS:-2}" >"$BUILD/make.log" 2>&1) ||
    { tail -n 30 "$BUILD/make.log" >&2; die "make failed"; }
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/share"
cp "$SRC/bochs" "$DEST/bin/bochs"
# SeaBIOS and the Cirrus VGA BIOS shipped in the source tree (used only when
# bookworm's bochsbios/vgabios are missing).
cp "$SRC"/bios/bios.bin-* "$SRC"/bios/vgabios-* "$DEST/share/" 2>/dev/null || true
"$DEST/bin/bochs" --help cpu 2>&1 | sed -n '/Supported CPU models/,$p' >"$DEST/cpu-models.txt" || true
finish "$ORIG"
log "built $DEST/bin/bochs"
echo "$DEST/bin/bochs"
