#!/usr/bin/env bash
# The lab: ipivmm on a real hardware-KVM module (kvm_amd) under an emulated CPU.
#
# These machines' /dev/kvm is kvm_pvm (no VMX/SVM: kvm_exit never fires,
# hypercalls never return, no APICv/AVIC). QEMU's TCG emulates an SVM CPU on
# which Debian's 6.1 kernel loads the real kvm_amd; ipivmm and its KVM test
# binaries run inside that guest. See docs/lab.md.
#
# Usage: scripts/lab.sh [quick|full|shell|clean] [--update-docs] [--smp N] [--timeout S]
#                      [--steps host,sweep,tests,inhibit,inhibit-loaded,hostswitch,stress] [--iterations N]
#   quick   host facts, the mode matrix (ping-pong + broadcast, icr/pv, APICv host/inhibit),
#           the KVM test binaries with every skip a failure, --apicv inhibit repeats, the
#           host switches (host --set/--restore, sweep --host-param), an npt=0 reload (CI runs this)
#   full    every workload, halted targets, the presets, repeats under load, and the
#           npt=0 pass with the tests again
#   shell   boot with everything loaded and drop to a shell on this terminal
#   initrd  only build the initramfs and print its path and the kernel's (for other emulators)
#   clean   remove the lab's work directory (target/lab); `clean --cache` also the downloads
# --update-docs   rewrite the table in docs/lab.md from this pass's results (and kvm_pvm's)
# --steps         only these steps (for working on one; the verdict then covers only them)
# --iterations    iterations per run of the sweeps (repeats per APIC mode for inhibit)
#
# Environment: IPIVMM_LAB_CACHE (downloads, default ~/.cache/ipivmm-lab),
# LAB_SMP (vCPUs of the emulated machine, 2), LAB_MEM (MiB, 2048),
# LAB_WEDGE_S (seconds without a guest heartbeat before a reboot, 180),
# LAB_KERNEL_ARGS (extra guest kernel args, default loglevel=4; e.g.
# "lab.wedge_at=sweep" wedges the first boot there: a test of the watchdog),
# LAB_EXTRA_CPIO (initramfs archives to append, e.g. build-selftests.sh's).
# Exit status: 0 when every check passed, 1 when one failed, 2 on a usage or setup error.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAB=$ROOT/scripts/lab
WORK=$ROOT/target/lab
CACHE=${IPIVMM_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipivmm-lab}
SMP=${LAB_SMP:-2}
# Seconds without a heartbeat from the guest before it counts as wedged.
WEDGE_S=${LAB_WEDGE_S:-180}
# Before the first heartbeat the kernel boots too: a little longer.
BOOT_GRACE_S=60
MEM=${LAB_MEM:-2048}
PASS=quick
UPDATE_DOCS=0
TIMEOUT=""
CLEAN_CACHE=0
STEPS=""
ITERATIONS=""

# Pinned Debian bookworm packages (name=version). A pin the registry no
# longer serves falls back to the newest of the same series, with a warning
# that the summary repeats.
KERNEL_PKG=linux-image-6.1.0-50-amd64
KERNEL_VER=6.1.176-1
BUSYBOX_PKG=busybox-static
BUSYBOX_VER=1:1.35.0-4+deb12u1+b1
QEMU_PKG=qemu-system-x86
# The modules the guest loads, dependencies resolved at build time.
MODULES="kvm-amd kvm-intel virtio_blk virtio_pci"

LAB_NAME=lab
TIMINGS=$WORK/timings.txt
# shellcheck source=lab/common.sh
. "$LAB/common.sh"

while [ $# -gt 0 ]; do
    case $1 in
    quick | full | shell | clean | initrd) PASS=$1 ;;
    --update-docs) UPDATE_DOCS=1 ;;
    --cache) CLEAN_CACHE=1 ;;
    --smp) SMP=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --iterations) ITERATIONS=$2; shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done

if [ "$PASS" = clean ]; then
    rm -rf "$WORK"
    [ $CLEAN_CACHE = 1 ] && rm -rf "$CACHE"
    log "removed $WORK$([ $CLEAN_CACHE = 1 ] && echo " and $CACHE")"
    exit 0
fi
case $PASS in quick) : "${TIMEOUT:=1500}" ;; full) : "${TIMEOUT:=7200}" ;; shell) : "${TIMEOUT:=86400}" ;; esac

# One lab at a time per checkout: two would share target/lab.
mkdir -p "$WORK" "$CACHE/debs"
exec 9>"$WORK/.lock"
flock -n 9 || die "another lab is running in this checkout ($WORK/.lock)"

WARNINGS=()
t0=$(date +%s)
: >"$TIMINGS"

tools() {
    command -v qemu-system-x86_64 >/dev/null || apt_install "$QEMU_PKG"
    command -v jq >/dev/null || apt_install jq
    command -v objcopy >/dev/null || apt_install binutils
}

# Download name=version into the cache, or the fallback the series offers.
fetch_deb() { # package version fallback-pattern
    local pkg=$1 ver=$2 pattern=$3 got
    got=$(ls "$CACHE"/debs/"${pkg}"_*.deb 2>/dev/null | head -n 1 || true)
    if [ -z "$got" ]; then
        (cd "$CACHE/debs" && apt-get download -qq "$pkg=$ver" >/dev/null 2>&1) ||
            (apt-get update -qq >/dev/null 2>&1; cd "$CACHE/debs" && apt-get download -qq "$pkg=$ver" >/dev/null 2>&1) || true
        got=$(ls "$CACHE"/debs/"${pkg}"_*.deb 2>/dev/null | head -n 1 || true)
    fi
    if [ -z "$got" ] && [ -n "$pattern" ]; then
        local alt
        alt=$(apt-cache search --names-only "$pattern" | awk '{print $1}' | sort -V | tail -n 1)
        [ -n "$alt" ] || die "no package matches $pattern in the Debian index"
        WARNINGS+=("pinned $pkg=$ver is gone from the registry; used $alt")
        log "warning: ${WARNINGS[-1]}"
        (cd "$CACHE/debs" && apt-get download -qq "$alt" >/dev/null 2>&1) || die "apt-get download $alt failed"
        got=$(ls "$CACHE"/debs/"${alt}"_*.deb | head -n 1)
    fi
    [ -n "$got" ] || die "cannot download $pkg=$ver"
    echo "$got"
}

fetch() {
    local kdeb bdeb
    kdeb=$(fetch_deb "$KERNEL_PKG" "$KERNEL_VER" '^linux-image-6\.1\.0-[0-9]+-amd64$')
    bdeb=$(fetch_deb "$BUSYBOX_PKG" "$BUSYBOX_VER" '')
    KROOT=$CACHE/root/$(basename "$kdeb" .deb)
    BBROOT=$CACHE/root/$(basename "$bdeb" .deb)
    for pair in "$kdeb:$KROOT" "$bdeb:$BBROOT"; do
        if [ ! -e "${pair#*:}/.done" ]; then
            rm -rf "${pair#*:}"
            mkdir -p "${pair#*:}"
            dpkg-deb -x "${pair%%:*}" "${pair#*:}"
            touch "${pair#*:}/.done"
        fi
    done
    VMLINUZ=$(ls "$KROOT"/boot/vmlinuz-* | head -n 1)
    KREL=${VMLINUZ##*/vmlinuz-}
    echo "kernel $(basename "$kdeb")" >"$WORK/versions.txt"
    echo "busybox $(basename "$bdeb")" >>"$WORK/versions.txt"
    echo "qemu $(qemu-system-x86_64 --version | head -n 1)" >>"$WORK/versions.txt"
}

# ipivmm, the KVM test binaries (their absolute paths kept, so tests that
# start target/release/ipivmm find it) and the example payload.
build() {
    (cd "$ROOT" && cargo build --release -q -p ipivmm)
    { (cd "$ROOT" && cargo test --release -q --no-run --message-format=json -p ipivmm-tests --tests) &&
        (cd "$ROOT" && cargo test --release -q --no-run --message-format=json -p ipivmm --test ctrl_c); } |
        jq -r 'select(.reason == "compiler-artifact" and .profile.test == true and .executable != null) | .executable' \
            >"$WORK/test-binaries.txt"
    [ -s "$WORK/test-binaries.txt" ] || die "cargo test --no-run listed no test binary"
    (cd "$ROOT/examples/exit-roundtrip" && cargo build --release -q --offline 2>/dev/null || cargo build --release -q)
}

# Module closure of $MODULES in load order, from each .ko's depends= field.
module_order() {
    local moddir=$1 seen=" " order=()
    visit() {
        local m=$1 f deps d
        case "$seen" in *" $m "*) return ;; esac
        seen="$seen$m "
        f=$(find "$moddir" -name "$m.ko" -o -name "${m//-/_}.ko" | head -n 1)
        [ -n "$f" ] || die "module $m not found under $moddir"
        deps=$(objcopy -O binary --only-section=.modinfo "$f" /dev/stdout | tr '\0' '\n' | sed -n 's/^depends=//p')
        for d in ${deps//,/ }; do visit "$d"; done
        order+=("$f")
    }
    for m in $MODULES; do visit "$m"; done
    printf '%s\n' "${order[@]}"
}

initramfs() {
    local st=$WORK/initramfs f lib
    rm -rf "$st"
    mkdir -p "$st"/{bin,lab/bin,lab/tests,lab/modules,proc,sys,dev,tmp,root,out}
    cp "$BBROOT/bin/busybox" "$st/bin/busybox"
    cp "$LAB/init.sh" "$st/init"
    chmod +x "$st/init"
    module_order "$KROOT/lib/modules/$KREL/kernel" | while read -r f; do
        cp "$f" "$st/lab/modules/"
        basename "$f" .ko >>"$st/lab/modules/order"
    done
    # The binaries at their host paths too: CARGO_BIN_EXE_* and the example
    # payload's path are compiled into the tests.
    local bins=("$ROOT/target/release/ipivmm")
    mapfile -t -O 1 bins < "$WORK/test-binaries.txt"
    local example=$ROOT/examples/exit-roundtrip/target/x86_64-unknown-linux-gnu/release/exit-roundtrip
    for f in "${bins[@]}" "$example"; do
        mkdir -p "$st$(dirname "$f")"
        cp "$f" "$st$f"
    done
    ln -s "$ROOT/target/release/ipivmm" "$st/lab/bin/ipivmm"
    # The VM the guest holds for the whole pass (why: scripts/lab/hold-vm.c).
    cc -O2 -static -o "$st/lab/bin/hold-vm" "$LAB/hold-vm.c" || die "cc: cannot build scripts/lab/hold-vm.c"
    while read -r f; do
        ln -s "$f" "$st/lab/tests/$(basename "$f" | sed 's/-[0-9a-f]\{16\}$//')"
    done <"$WORK/test-binaries.txt"
    echo "$example" >"$st/lab/example-payload"
    # Tests that need host tools or the source tree, which the guest lacks
    # (objdump, cargo, examples/), are run on the host. Open in the lab
    # (docs/lab.md, "Open"): the 300-vCPU scale tests (on 2 emulated CPUs an
    # IPI acknowledgement can take longer than the payload's 60 s).
    echo "--skip builds_as_a_static --skip payload_has_no_sse --skip library_only_example --skip at_300_vcpus" >"$st/lab/tests.skip"
    for lib in $(ldd "${bins[@]}" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | sort -u); do
        mkdir -p "$st$(dirname "$lib")"
        cp -L "$lib" "$st$lib"
    done
    (cd "$st" && find . | "$BBROOT/bin/busybox" cpio -o -H newc 2>/dev/null) >"$WORK/initrd.cpio"
    # LAB_EXTRA_CPIO: archives appended as they are (e.g. the KVM selftests of
    # scripts/lab/build-selftests.sh, for the steps extra and faults).
    for f in ${LAB_EXTRA_CPIO:-}; do cat "$f" >>"$WORK/initrd.cpio"; done
    rm -rf "$st"
}

# One boot of the guest: QEMU in the background, its console in
# console-N.log (lines starting "lab:" shown live), and a watchdog: the guest
# prints a heartbeat every 20 s, and when none comes for $WEDGE_S seconds the
# guest is wedged (seen under TCG: the emulated CPUs stop taking their own
# interrupts while in the nested guest), so the CPU state is saved from the
# QEMU monitor and QEMU is stopped. Sets BOOT_RC: 0 ended, 124 out of time,
# 125 wedged.
boot_once() { # boot number, time limit, extra kernel args
    local n=$1 limit=$2 extra=$3 disk=$WORK/out-$1.img log=$WORK/console-$1.log
    rm -f "$disk"
    truncate -s 1G "$disk"
    # The guest stops starting steps 60 s before QEMU's own limit.
    # nokaslr: a wedged guest's RIPs (wedge-N.txt) are named from the kallsyms it saved at boot.
    local append="console=ttyS0 panic=-1 nokaslr lab.pass=$PASS lab.boot=$n lab.deadline=$((limit - 60)) $extra"
    [ -n "$STEPS" ] && append="$append lab.steps=$STEPS"
    [ -n "$ITERATIONS" ] && append="$append lab.iterations=$ITERATIONS"
    append="$append ${LAB_KERNEL_ARGS:-loglevel=4}"
    log "boot $n: $KREL under QEMU TCG ($SMP vCPUs, $MEM MiB), pass '$PASS', at most ${limit}s"
    : >"$log"
    qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp "$SMP" -m "$MEM" \
        -kernel "$VMLINUZ" -initrd "$WORK/initrd.cpio" -append "$append" \
        -drive "file=$disk,format=raw,if=virtio" -display none -nodefaults -no-reboot \
        -serial "file:$log" -monitor "unix:$WORK/monitor.sock,server=on,wait=off" </dev/null &
    QEMU_PID=$!
    tail -n +1 -F --pid=$QEMU_PID "$log" 2>/dev/null | grep --line-buffered '^lab:' |
        grep --line-buffered -v '^lab: heartbeat' >&2 &
    local start now beats=0 seen=0 last_beat
    start=$(date +%s)
    last_beat=$start
    BOOT_RC=0
    while kill -0 $QEMU_PID 2>/dev/null; do
        sleep 5
        now=$(date +%s)
        beats=$(grep -c '^lab: heartbeat' "$log" 2>/dev/null || true)
        [ "$beats" != "$seen" ] && { seen=$beats; last_beat=$now; }
        if [ $((now - start)) -ge "$limit" ]; then
            BOOT_RC=124
        elif [ $((now - last_beat)) -ge $((WEDGE_S + (seen > 0 ? 0 : BOOT_GRACE_S))) ]; then
            BOOT_RC=125
            monitor_dump >"$WORK/wedge-$n.txt" 2>&1
        else
            continue
        fi
        # (QEMU may be gone by now: under set -e a failed kill must not end the lab.)
        kill $QEMU_PID 2>/dev/null || true
        sleep 2
        kill -9 $QEMU_PID 2>/dev/null || true
        break
    done
    wait $QEMU_PID 2>/dev/null || true
    return 0
}

# Every CPU's registers from the QEMU monitor (for a wedged guest).
monitor_dump() {
    python3 - "$WORK/monitor.sock" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(3)
def read():
    out = b""
    try:
        while not out.endswith(b"(qemu) "):
            d = s.recv(65536)
            if not d:
                break
            out += d
    except OSError:
        pass
    return out.decode(errors="replace")
read()
for cmd in ["info cpus", "info registers -a"]:
    s.sendall(cmd.encode() + b"\n")
    print(read().replace("\x1b[K", "").replace("\x1b[D", ""))
PY
}

# Names every RIP of a wedge dump ($1) from the guest's own kallsyms ($2,
# saved at boot: Debian's System.map is a stub; booted nokaslr), the lines
# first in the file.
symbolize() {
    python3 - "$1" "$2" <<'PY'
import bisect, re, sys
syms = []
try:
    for line in open(sys.argv[2]):
        f = line.split()
        if len(f) >= 3:
            syms.append((int(f[0], 16), f[2] + (" " + f[3] if len(f) > 3 else "")))
except OSError:
    pass
syms.sort()
def name_of(addr):
    i = bisect.bisect_right(syms, (addr, "~")) - 1
    return f"{syms[i][1]}+{addr - syms[i][0]:#x}" if i >= 0 and addr - syms[i][0] < 1 << 20 else "?"
text = open(sys.argv[1]).read()
names = [f"RIP {rip} = {name_of(int(rip, 16))}" for rip in re.findall(r"RIP=([0-9a-f]{16})", text)]
open(sys.argv[1], "w").write("\n".join(names) + "\n\n" + text)
PY
}

# The steps a results tree finished (the guest writes steps.tsv after each).
done_steps() {
    [ -s "$1/steps.tsv" ] && cut -f1 "$1/steps.tsv" | paste -sd, - || true
}

# Boots until the pass ends, rebooting (at most twice) after a wedge and
# resuming after the steps that finished; each boot's results are merged
# into results.new (steps.tsv appended).
boot() {
    local new=$WORK/results.new n=1 left=$TIMEOUT started running done_list
    rm -rf "$new"
    mkdir -p "$new"
    : >"$WORK/console.log"
    while :; do
        started=$(date +%s)
        done_list=$(done_steps "$new")
        boot_once $n "$left" "${done_list:+lab.done=$done_list}"
        mkdir -p "$new/boot-$n"
        tar -xf "$WORK/out-$n.img" -C "$new/boot-$n" 2>/dev/null || true
        [ -s "$new/boot-$n/steps.tsv" ] && cat "$new/boot-$n/steps.tsv" >>"$new/steps.tsv"
        rm -f "$new/boot-$n/steps.tsv"
        cp -r "$new/boot-$n/." "$new/" && rm -rf "$new/boot-$n"
        cat "$WORK/console-$n.log" >>"$WORK/console.log"
        rm -f "$WORK/out-$n.img"
        left=$((left - ($(date +%s) - started)))
        [ $BOOT_RC = 124 ] && WARNINGS+=("QEMU stopped after ${TIMEOUT}s in all")
        [ $BOOT_RC = 125 ] || break
        running=$(grep '^lab: step ' "$WORK/console-$n.log" | tail -n 1 | sed -E 's/^lab: step ([^:]+):.*/\1/')
        WARNINGS+=("boot $n: guest wedged during step ${running:-?} (no heartbeat for ${WEDGE_S}s; CPU state in wedge-$n.txt); rebooted to resume after the steps that finished")
        cp "$WORK/wedge-$n.txt" "$new/" 2>/dev/null || true
        [ -e "$new/wedge-$n.txt" ] && symbolize "$new/wedge-$n.txt" "$new/kallsyms.txt"
        [ -e "$new/wedge-$n.txt" ] && log "boot $n: wedged at: $(grep '^RIP [0-9a-f]' "$new/wedge-$n.txt" | sort | uniq -c | tr -s ' ' | paste -sd';' -)"
        log "warning: ${WARNINGS[-1]}"
        [ $n -lt 3 ] && [ "$left" -gt 300 ] || break
        n=$((n + 1))
    done
}

collect() {
    local new=$WORK/results.new
    cp "$WORK/console.log" "$WORK/versions.txt" "$WORK/timings.txt" "$new/" 2>/dev/null || true
    [ -s "$new/steps.tsv" ] || WARNINGS+=("no result archive on the output disk")
    : >"$new/warnings.txt"
    [ ${#WARNINGS[@]} -eq 0 ] || printf '%s\n' "${WARNINGS[@]}" >"$new/warnings.txt"
    rm -rf "$WORK/results"
    mv "$new" "$WORK/results"
    rm -f "$WORK"/out*.img "$WORK/initrd.cpio" "$WORK"/console-*.log
}

# The shell pass: QEMU on this terminal.
shell_boot() {
    local disk=$WORK/out-shell.img
    truncate -s 1G "$disk"
    qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp "$SMP" -m "$MEM" \
        -kernel "$VMLINUZ" -initrd "$WORK/initrd.cpio" \
        -append "console=ttyS0 panic=-1 lab.pass=shell lab.deadline=999999" \
        -drive "file=$disk,format=raw,if=virtio" -display none -nodefaults -no-reboot -serial stdio
}

tools
timed fetch fetch
timed build build
timed initramfs initramfs
if [ "$PASS" = initrd ]; then
    echo "$WORK/initrd.cpio"
    echo "$VMLINUZ"
    exit 0
fi
if [ "$PASS" = shell ]; then
    shell_boot
    exit 0
fi
timed boot boot
collect
echo "total $(($(date +%s) - t0))" >>"$WORK/results/timings.txt"
rc=0
"$LAB/verify.sh" "$([ -n "$STEPS" ] && echo custom || echo "$PASS")" "$WORK/results" || rc=1
if [ $UPDATE_DOCS = 1 ]; then
    "$LAB/table.sh" "$WORK/results" "$ROOT/docs/lab.md" || rc=1
fi
exit $rc
