#!/usr/bin/env bash
# Downloads a Debian kernel package (linux-image-*-amd64, its modules inside)
# from another suite than the lab's pinned bookworm 6.1 into the lab's cache,
# with `apt-get download` on a private apt configuration (the system's
# sources stay as they are), and prints the .deb's path, for
#   cargo xtask lab ... --kernel "$(scripts/lab/fetch-kernel.sh trixie)"
# (docs/lab.md, "Any kernel").
# Usage: scripts/lab/fetch-kernel.sh SUITE [PACKAGE]
#   SUITE     a Debian suite (trixie, forky, sid, bookworm-backports)
#   PACKAGE   the image package (default: what SUITE's linux-image-amd64
#             depends on, e.g. linux-image-6.12.57+deb13-amd64)
# Environment: IPIVMM_LAB_CACHE (default ~/.cache/ipivmm-lab).
set -euo pipefail
BUILD_NAME=fetch-kernel
# shellcheck source-path=SCRIPTDIR source=build-common.sh
. "$(dirname "$0")/build-common.sh"
[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: $0 SUITE [PACKAGE]"
SUITE=$1
deb_src "$SUITE-image" \
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $SUITE main"
aptx update >/dev/null 2>&1 || die "apt-get update ($SUITE) failed"
apt_cache() {
    apt-cache -o Dir::Etc::sourcelist="$APT/sources.list" -o Dir::Etc::sourceparts=- \
        -o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT/cache" "$@"
}
PKG=${2:-$(apt_cache show linux-image-amd64 2>/dev/null |
    sed -n 's/^Depends: \(linux-image-[^ ,]*\).*/\1/p' | sort -V | tail -n 1)}
[ -n "$PKG" ] || die "no linux-image-amd64 in $SUITE: name the package"
DEBS=$CACHE/debs-$SUITE
mkdir -p "$DEBS"
deb=$(ls "$DEBS/${PKG}_"*.deb 2>/dev/null | tail -n 1 || true)
if [ -z "$deb" ]; then
    log "downloading $PKG from Debian $SUITE"
    (cd "$DEBS" && aptx download -qq "$PKG" >/dev/null 2>&1) || die "apt-get download $PKG ($SUITE) failed"
    deb=$(ls "$DEBS/${PKG}_"*.deb | tail -n 1)
fi
echo "$deb"
