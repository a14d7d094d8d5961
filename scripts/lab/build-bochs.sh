#!/usr/bin/env bash
# Builds Bochs 3.0 (Debian trixie's source package) for the Intel lab
# (scripts/lab/bochs.sh) once, into $CACHE/bochs-3.0/{bin/bochs,share}.
# Bookworm ships only Bochs 2.7 (no posted interrupts, so kvm_intel runs with
# enable_apicv=N); 3.0 emulates APICv (virtual-interrupt delivery, posted
# interrupts). The build is configured without GUI, debugger or plugins, and
# scripts/lab/bochs-3.0-*.patch are applied (the posted-interrupt descriptor
# alignment check: without it no APICv VM can enter).
# Usage: scripts/lab/build-bochs.sh [--force]     prints the bochs binary's path
# Environment: IPIVMM_LAB_CACHE (default ~/.cache/ipivmm-lab), BOCHS_JOBS (make -j, 2),
# BOCHS_PATCHES=none (build without the patches, into bochs-3.0-unpatched) or
# NAME[,NAME] (only these patches, into bochs-3.0-only-NAME...); scripts/lab/bochs.sh
# passes it through.
set -euo pipefail
CACHE=${IPIVMM_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipivmm-lab}
DEST=$CACHE/bochs-3.0
log() { echo "bochs-build: $*" >&2; }
die() { echo "bochs-build: error: $*" >&2; exit 2; }
LAB=$(cd "$(dirname "$0")" && pwd)
# Fixes to Bochs applied before building (see docs/lab-intel.md): the build
# is redone when they change.
PATCHES=("$LAB"/bochs-3.0-*.patch)
# BOCHS_PATCHES=none: trixie's Bochs as it is, built beside the patched one
# (to reproduce the VM-entry failure); BOCHS_PATCHES=NAME[,NAME]: only
# bochs-3.0-NAME.patch (e.g. pid-align: to reproduce the hang the
# vmentry-intr-mask patch fixes), into bochs-3.0-only-NAME[-NAME].
if [ "${BOCHS_PATCHES:-}" = none ]; then
    PATCHES=()
    DEST=$DEST-unpatched
elif [ -n "${BOCHS_PATCHES:-}" ]; then
    PATCHES=()
    for n in ${BOCHS_PATCHES//,/ }; do
        [ -e "$LAB/bochs-3.0-$n.patch" ] || die "no $LAB/bochs-3.0-$n.patch"
        PATCHES+=("$LAB/bochs-3.0-$n.patch")
    done
    DEST=$DEST-only-${BOCHS_PATCHES//,/-}
fi
# --disable-show-ips: the IPS display logs from a SIGALRM handler, which
# deadlocks Bochs (futex, 0% CPU) when the alarm lands inside another log write.
CONFIGURE=(--with-nogui --without-x11 --without-sdl2 --without-wx
    --enable-x86-64 --enable-smp --enable-vmx=2 --enable-svm --enable-avx --enable-evex
    --enable-cpu-level=6 --enable-all-optimizations --enable-pci --disable-plugins
    --disable-debugger --disable-docbook --disable-show-ips)
STAMP=$({ for p in "${PATCHES[@]}"; do cat "$p"; done; echo "${CONFIGURE[*]}"; } | sha256sum | cut -c1-16)
[ "${1:-}" = --force ] && rm -rf "$DEST"
if [ -x "$DEST/bin/bochs" ] && [ "$(cat "$DEST/.done" 2>/dev/null)" = "$STAMP" ]; then
    echo "$DEST/bin/bochs"
    exit 0
fi
command -v gcc >/dev/null && command -v g++ >/dev/null && command -v make >/dev/null && command -v patch >/dev/null ||
    { [ "$(id -u)" = 0 ] || die "need gcc, g++, make"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends build-essential patch >/dev/null; }

# The trixie source package through a private apt configuration: the system's
# sources stay as they are.
APT=$CACHE/trixie-apt
mkdir -p "$APT/lists/partial" "$CACHE/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$APT/sources.list"
aptx() { apt-get -q -o Dir::Etc::sourcelist="$APT/sources.list" -o Dir::Etc::sourceparts=- \
    -o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT/cache" "$@"; }
if ! ls "$CACHE"/src/bochs_3.*.orig.tar.* >/dev/null 2>&1; then
    log "fetching the bochs source package from Debian trixie"
    aptx update >/dev/null 2>&1 || die "apt-get update (trixie deb-src) failed"
    # The .dsc may be refused by a mirror; only the two tarballs are needed.
    (cd "$CACHE/src" && aptx source --download-only bochs >/dev/null 2>&1) || true
    ls "$CACHE"/src/bochs_3.*.orig.tar.* >/dev/null 2>&1 || die "could not download bochs 3.x sources from trixie"
fi
ORIG=$(ls "$CACHE"/src/bochs_3.*.orig.tar.* | head -n 1)
BUILD=$(mktemp -d "${TMPDIR:-/tmp}/bochs-build.XXXXXX")
trap 'rm -rf "$BUILD"' EXIT
tar -xf "$ORIG" -C "$BUILD"
SRC=$(ls -d "$BUILD"/bochs-*/ | head -n 1)
for p in "${PATCHES[@]}"; do
    [ -e "$p" ] || continue
    log "applying $(basename "$p")"
    patch -d "$SRC" -p1 -s <"$p" || die "$(basename "$p") does not apply"
done
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
basename "$ORIG" >"$DEST/source.txt"
echo "$STAMP" >"$DEST/.done"
log "built $DEST/bin/bochs"
echo "$DEST/bin/bochs"
