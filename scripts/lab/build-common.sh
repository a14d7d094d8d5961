# shellcheck shell=bash
# What scripts/lab/build-qemu.sh and scripts/lab/build-bochs.sh share, sourced
# by both after setting BUILD_NAME (their log prefix): an emulator built once
# per patch set from a Debian source package with a patch series of ours,
# into the lab's cache (IPIVMM_LAB_CACHE, default ~/.cache/ipivmm-lab).
#   series_patches PREFIX WANT   PATCHES: the series' patches WANT picks
#   build_dest DIR BINARY FORCE CONFIGURE...
#                                DEST and STAMP; a finished build is printed
#                                and ends the script
#   apt_need PKG...              installs what the build lacks (as root)
#   deb_src SUITE LINE...        a private apt configuration for aptx
#   fetch_source PKG SUITE GLOB  the source package into $CACHE/src
#   build_dir                    BUILD, a scratch directory removed at exit
#   apply_patches SRC            PATCHES applied to the tree SRC
#   patched_files                the paths PATCHES touch, one a line
#   finish SOURCE                DEST's record of what it was built from
CACHE=${IPIVMM_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipivmm-lab}
LAB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "$BUILD_NAME: $*" >&2; }
die() { echo "$BUILD_NAME: error: $*" >&2; exit 2; }

# PATCHES=($LAB/PREFIX-NAME.patch ...) in the order of $LAB/PREFIX.series
# (later patches are made on top of earlier ones). A PREFIX-*.patch the
# series does not name is an error, not silently left out. WANT: empty
# (every patch), `none` (the package as Debian ships it) or NAME[,NAME]
# (only these, still in series order).
series_patches() {
    local prefix=$1 want=$2 n f
    local series=()
    while read -r n; do
        n=${n%%#*}
        n=${n//[[:space:]]/}
        [ -z "$n" ] || series+=("$n")
    done <"$LAB/$prefix.series"
    for f in "$LAB/$prefix"-*.patch; do
        [ -e "$f" ] || continue
        n=${f##*/"$prefix"-}
        n=${n%.patch}
        case " ${series[*]} " in *" $n "*) ;; *) die "$f is not in $LAB/$prefix.series" ;; esac
    done
    local chosen=" ${series[*]} "
    if [ "$want" = none ]; then
        chosen=" "
    elif [ -n "$want" ]; then
        chosen=" ${want//,/ } "
        for n in $chosen; do
            case " ${series[*]} " in *" $n "*) ;; *) die "no patch $n in $LAB/$prefix.series" ;; esac
        done
    fi
    PATCHES=()
    for n in "${series[@]}"; do
        case "$chosen" in *" $n "*) PATCHES+=("$LAB/$prefix-$n.patch") ;; esac
    done
}

# DEST=$CACHE/DIR/STAMP, STAMP a hash of the patches' diffs (not their
# headers: descriptions change without changing the build) and the
# configure flags, so checkouts with different patch sets share the cache
# without rebuilding each other's. FORCE=--force removes DEST first; a
# finished build there (DEST/BINARY and its .done) is printed, and the
# script ends.
build_dest() {
    local dir=$1 binary=$2 force=$3 p
    shift 3
    STAMP=$({ for p in "${PATCHES[@]}"; do sed -n '/^--- /,$p' "$p"; done; echo "$*"; } | sha256sum | cut -c1-16)
    DEST=$CACHE/$dir/$STAMP
    if [ "$force" = --force ]; then rm -rf "$DEST"; fi
    if [ -x "$DEST/$binary" ] && [ "$(cat "$DEST/.done" 2>/dev/null)" = "$STAMP" ]; then
        echo "$DEST/$binary"
        exit 0
    fi
}

# Installs the packages named (sorted, once each) when there are any: root
# only, an apt-get update first when the install fails without one.
apt_need() {
    [ $# -gt 0 ] || return 0
    local pkgs
    mapfile -t pkgs < <(printf '%s\n' "$@" | sort -u)
    [ "$(id -u)" = 0 ] || die "need ${pkgs[*]} installed"
    log "installing ${pkgs[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${pkgs[@]}" >/dev/null; } ||
        die "apt-get install failed"
}

# A private apt configuration, $CACHE/SUITE-apt, with the deb-src lines
# given, for aptx: the system's sources stay as they are.
deb_src() {
    APT=$CACHE/$1-apt
    shift
    mkdir -p "$APT/lists/partial" "$CACHE/src"
    printf '%s\n' "$@" >"$APT/sources.list"
}
aptx() {
    apt-get -q -o Dir::Etc::sourcelist="$APT/sources.list" -o Dir::Etc::sourceparts=- \
        -o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT/cache" "$@"
}

# The source package PKG of SUITE (deb_src) into $CACHE/src, unless a file
# there matches GLOB already (the files GLOB names are what the build needs:
# a mirror may refuse the rest).
fetch_source() {
    local pkg=$1 suite=$2 glob=$3
    compgen -G "$CACHE/src/$glob" >/dev/null && return 0
    log "fetching the $pkg source package from Debian $suite"
    aptx update >/dev/null 2>&1 || die "apt-get update ($suite deb-src) failed"
    (cd "$CACHE/src" && aptx source --download-only "$pkg" >/dev/null 2>&1) || true
    compgen -G "$CACHE/src/$glob" >/dev/null || die "could not download the $pkg sources ($glob) from $suite"
}

# BUILD: a scratch directory, removed when the script ends.
build_dir() {
    BUILD=$(mktemp -d "${TMPDIR:-/tmp}/$BUILD_NAME.XXXXXX")
    trap 'rm -rf "$BUILD"' EXIT
}

# Applies PATCHES, in series order, to the source tree $1.
apply_patches() {
    local p
    for p in "${PATCHES[@]}"; do
        log "applying $(basename "$p")"
        patch -d "$1" -p1 -s <"$p" || die "$(basename "$p") does not apply"
    done
}

# The paths (relative to the tree) the patches of PATCHES touch: created,
# changed or deleted.
patched_files() {
    local p
    for p in "${PATCHES[@]}"; do
        sed -n -e 's|^--- a/\([^[:space:]]*\).*|\1|p' -e 's|^+++ b/\([^[:space:]]*\).*|\1|p' "$p"
    done | sort -u
}

# Records in DEST what it was built from (the source file $1, the patches)
# and marks the build finished (.done holds its STAMP).
finish() {
    basename "$1" >"$DEST/source.txt"
    printf '%s\n' "${PATCHES[@]##*/}" >"$DEST/patches.txt"
    echo "$STAMP" >"$DEST/.done"
}
