# Shell helpers of the lab scripts (scripts/lab.sh, scripts/lab/bochs.sh),
# sourced after they set LAB_NAME (the log prefix) and TIMINGS (the file
# `timed` appends to).

die() { echo "$LAB_NAME: error: $*" >&2; exit 2; }
log() { echo "$LAB_NAME: $*" >&2; }

timed() { # name, command...: run and record the wall time
    local name=$1 s
    shift
    s=$(date +%s)
    "$@"
    echo "$name $(($(date +%s) - s))" >>"$TIMINGS"
}

apt_install() { # packages...: install what is missing (needs root)
    [ "$(id -u)" = 0 ] || die "need $* installed (run as root, or: apt-get install $*)"
    log "installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; } ||
        die "apt-get install $* failed"
}
