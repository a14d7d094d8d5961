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
CACHE=${IPIVMM_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipivmm-lab}
log() { echo "bochs-build: $*" >&2; }
die() { echo "bochs-build: error: $*" >&2; exit 2; }
LAB=$(cd "$(dirname "$0")" && pwd)
# Fixes to Bochs applied before building (see docs/lab-intel.md), in the
# order scripts/lab/bochs-3.0.series gives (later patches are made on top of
# earlier ones). A patch file the series does not name is an error, not
# silently left out.
SERIES=()
while read -r n; do
    n=${n%%#*}
    n=${n//[[:space:]]/}
    [ -z "$n" ] || SERIES+=("$n")
done <"$LAB/bochs-3.0.series"
for f in "$LAB"/bochs-3.0-*.patch; do
    [ -e "$f" ] || continue
    n=${f##*/bochs-3.0-}
    n=${n%.patch}
    case " ${SERIES[*]} " in *" $n "*) ;; *) die "$f is not in $LAB/bochs-3.0.series" ;; esac
done
# BOCHS_PATCHES=none: trixie's Bochs as it is (to reproduce the VM-entry
# failure); BOCHS_PATCHES=NAME[,NAME]: only bochs-3.0-NAME.patch (e.g.
# pid-align: to reproduce the hang the vmentry-intr-mask patch fixes).
WANT=" ${SERIES[*]} "
if [ "${BOCHS_PATCHES:-}" = none ]; then
    WANT=" "
elif [ -n "${BOCHS_PATCHES:-}" ]; then
    WANT=" ${BOCHS_PATCHES//,/ } "
    for n in $WANT; do
        case " ${SERIES[*]} " in *" $n "*) ;; *) die "no patch $n in $LAB/bochs-3.0.series" ;; esac
    done
fi
PATCHES=()
for n in "${SERIES[@]}"; do
    case "$WANT" in *" $n "*) PATCHES+=("$LAB/bochs-3.0-$n.patch") ;; esac
done
# --disable-show-ips: the IPS display logs from a SIGALRM handler, which
# deadlocks Bochs (futex, 0% CPU) when the alarm lands inside another log write.
CONFIGURE=(--with-nogui --without-x11 --without-sdl2 --without-wx
    --enable-x86-64 --enable-smp --enable-vmx=2 --enable-svm --enable-avx --enable-evex
    --enable-cpu-level=6 --enable-all-optimizations --enable-pci --disable-plugins
    --disable-debugger --disable-docbook --disable-show-ips)
# The stamp covers the diffs, not the patches' headers (their descriptions
# change without changing Bochs).
STAMP=$({ for p in "${PATCHES[@]}"; do sed -n '/^--- /,$p' "$p"; done; echo "${CONFIGURE[*]}"; } | sha256sum | cut -c1-16)
DEST=$CACHE/bochs-3.0/$STAMP
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
printf '%s\n' "${PATCHES[@]##*/}" >"$DEST/patches.txt"
echo "$STAMP" >"$DEST/.done"
log "built $DEST/bin/bochs"
echo "$DEST/bin/bochs"
