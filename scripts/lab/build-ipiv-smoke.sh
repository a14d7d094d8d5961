#!/usr/bin/env bash
# Packs CI's IPIv smoke for the Bochs lab: scripts/lab/probe-ipiv-smoke.sh
# as /lab/extra.sh in a newc archive to append to the lab's initramfs
# (`cargo xtask lab --emulator bochs --steps host,extra --cpio OUT`).
# Usage: scripts/lab/build-ipiv-smoke.sh OUT.cpio; prints OUT's path.
# cpio: the system's, else the lab cache's busybox (a quick pass fetches it).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# = 1 ] || { echo "usage: $0 OUT.cpio" >&2; exit 2; }
OUTFILE=$(realpath -m "$1")
CACHE=${IPIVMM_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipivmm-lab}
if command -v cpio >/dev/null; then
    CPIO=(cpio)
else
    BUSYBOX=$(ls "$CACHE"/root/busybox-static_*/bin/busybox 2>/dev/null | head -n 1 || true)
    [ -x "$BUSYBOX" ] || { echo "no cpio and no busybox in $CACHE (run cargo xtask lab initrd)" >&2; exit 2; }
    CPIO=("$BUSYBOX" cpio)
fi
st=$(mktemp -d)
trap 'rm -rf "$st"' EXIT
mkdir -p "$st/lab"
install -m 755 scripts/lab/probe-ipiv-smoke.sh "$st/lab/extra.sh"
mkdir -p "$(dirname "$OUTFILE")"
(cd "$st" && find . | "${CPIO[@]}" -o -H newc 2>/dev/null) >"$OUTFILE"
echo "$OUTFILE"
