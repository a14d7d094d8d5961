#!/usr/bin/env bash
# The Intel side of the lab: ipivmm on a real kvm_intel under Bochs's emulated
# VMX CPU (scripts/lab.sh does the AMD side under QEMU TCG). See docs/lab-intel.md.
#
# Usage: scripts/lab/bochs.sh [2.7|3.0] [options] [kernel args...]
#   2.7   Debian bookworm's bochs package: VMX without posted interrupts, so
#         kvm_intel loads with enable_apicv=N (default cpu model broadwell_ult)
#   3.0   Debian trixie's source package with scripts/lab/bochs-3.0.series
#         applied, built once per patch set into the cache
#         (scripts/lab/build-bochs.sh; BOCHS_PATCHES passes through): APICv and
#         IPI virtualization emulated (default corei7_skylake_x)
# Options:
#   --timeout S      wall-clock limit for Bochs (default 3600)
#   --cpu MODEL      Bochs cpu model
#   --ips N          Bochs instructions per emulated second (default 60000000)
#   --initrd F --kernel F   use these instead of building (scripts/lab.sh initrd)
#   --cpio F         append this newc archive to the initramfs (repeatable): the
#                    kernel unpacks concatenated archives, later files win
#   --results DIR    where the results go (default target/lab-bochs/results-VERSION)
#   --no-verify      skip scripts/lab/verify.sh
# Kernel args go to the guest (scripts/lab/init.sh), e.g.
#   lab.steps=host,sweep,tests lab.iterations=20 lab.kvm=enable_apicv=0,dump_invalid_vmcs=1
# Without lab.steps= the guest runs lab.pass (quick unless given).
#
# Environment: IPIVMM_LAB_CACHE (downloads and the Bochs 3.0 build, default
# ~/.cache/ipivmm-lab), LAB_SMP (emulated CPUs, 2), LAB_MEM (MiB, 2048).
# Exit status: 0 when verify passed, 1 when a check failed, 2 on a usage or setup error.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LAB=$ROOT/scripts/lab
CACHE=${IPIVMM_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipivmm-lab}
SMP=${LAB_SMP:-2}
MEM=${LAB_MEM:-2048}
VER=3.0
TIMEOUT=3600
CPU=""
IPS=60000000
INITRD=""
VMLINUZ=""
CPIOS=()
RESULTS=""
VERIFY=1
KARGS=()
# The ATA disk's drivers: Bochs has no virtio; Debian builds libata as modules.
ATA_MODULES="ata_piix sd_mod"

LAB_NAME=bochs-lab
# shellcheck source=common.sh
. "$LAB/common.sh"

while [ $# -gt 0 ]; do
    case $1 in
    2.7 | 3.0) VER=$1 ;;
    --timeout) TIMEOUT=$2; shift ;;
    --cpu) CPU=$2; shift ;;
    --ips) IPS=$2; shift ;;
    --initrd) INITRD=$2; shift ;;
    --kernel) VMLINUZ=$2; shift ;;
    --cpio) CPIOS+=("$(realpath "$2")"); shift ;;
    --results) RESULTS=$2; shift ;;
    --no-verify) VERIFY=0 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) KARGS+=("$1") ;;
    esac
    shift
done
[ -n "$CPU" ] || CPU=$([ "$VER" = 2.7 ] && echo broadwell_ult || echo corei7_skylake_x)
WORK=$ROOT/target/lab-bochs
RESULTS=${RESULTS:-$WORK/results-$VER}
RUN=$WORK/run

# One Bochs lab at a time per checkout.
mkdir -p "$WORK"
exec 9>"$WORK/.lock"
flock -n 9 || die "another Bochs lab is running in this checkout ($WORK/.lock)"
BOCHS_PID=""
TAIL_PID=""
cleanup() {
    [ -n "$BOCHS_PID" ] && kill "$BOCHS_PID" 2>/dev/null || true
    [ -n "$TAIL_PID" ] && kill "$TAIL_PID" 2>/dev/null || true
    rm -rf "$RUN"
}
trap cleanup EXIT
rm -rf "$RUN"
mkdir -p "$RUN"
TIMINGS=$RUN/timings.txt
: >"$TIMINGS"
WARNINGS=()

tools() {
    local need=()
    [ -d /usr/lib/grub/i386-pc ] || need+=(grub-pc-bin)
    command -v grub-mkrescue >/dev/null || need+=(grub-common)
    command -v xorriso >/dev/null || need+=(xorriso)
    command -v mformat >/dev/null || need+=(mtools)
    command -v jq >/dev/null || need+=(jq)
    command -v objcopy >/dev/null || need+=(binutils)
    # BIOS images for both versions (3.0's source package has them stripped).
    [ -e /usr/share/bochs/BIOS-bochs-latest ] || need+=(bochsbios)
    [ -e /usr/share/vgabios/vgabios.bin ] || need+=(vgabios)
    [ "$VER" = 2.7 ] && ! command -v bochs >/dev/null && need+=(bochs)
    [ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"
    if [ "$VER" = 2.7 ]; then
        BOCHS=$(command -v bochs)
    else
        BOCHS=$("$LAB/build-bochs.sh")
    fi
}

initrd() {
    if [ -z "$INITRD" ]; then
        local out
        out=$("$ROOT/scripts/lab.sh" initrd) || die "scripts/lab.sh initrd failed"
        INITRD=$(echo "$out" | tail -n 2 | head -n 1)
        VMLINUZ=$(echo "$out" | tail -n 1)
    fi
    [ -s "$INITRD" ] && [ -s "$VMLINUZ" ] || die "no initramfs ($INITRD) or kernel ($VMLINUZ)"
    cp "$INITRD" "$RUN/initrd.cpio"
}

# The ATA drivers and their dependencies (from each .ko's depends=), as an
# archive that adds them to /lab/modules and names them in order.extra.
ata_cpio() {
    local krel moddir st=$RUN/ata seen=" "
    krel=${VMLINUZ##*/vmlinuz-}
    moddir=$(cd "$(dirname "$VMLINUZ")/.." && pwd)/lib/modules/$krel/kernel
    [ -d "$moddir" ] || die "no modules for $krel at $moddir"
    BUSYBOX=$(ls "$CACHE"/root/busybox-static_*/bin/busybox 2>/dev/null | head -n 1)
    [ -x "$BUSYBOX" ] || die "no busybox in $CACHE (scripts/lab.sh initrd fetches it)"
    mkdir -p "$st/lab/modules"
    visit() {
        local m=$1 f d
        case "$seen" in *" $m "*) return ;; esac
        seen="$seen$m "
        f=$(find "$moddir" -name "$m.ko" -o -name "${m//-/_}.ko" | head -n 1)
        [ -n "$f" ] || die "module $m not found under $moddir"
        for d in $(objcopy -O binary --only-section=.modinfo "$f" /dev/stdout | tr '\0' '\n' | sed -n 's/^depends=//p' | tr ',' ' '); do
            visit "$d"
        done
        cp "$f" "$st/lab/modules/"
        basename "$f" .ko >>"$st/lab/modules/order.extra"
    }
    for m in $ATA_MODULES; do visit "$m"; done
    (cd "$st" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null) >"$RUN/ata.cpio"
}

iso() {
    local d=$RUN/iso extra="" i=0 f
    mkdir -p "$d/boot/grub"
    cp "$VMLINUZ" "$d/boot/vmlinuz"
    mv "$RUN/initrd.cpio" "$d/boot/initrd.cpio"
    mv "$RUN/ata.cpio" "$d/boot/ata.cpio"
    for f in "${CPIOS[@]}"; do
        cp "$f" "$d/boot/extra$i.cpio"
        extra="$extra /boot/extra$i.cpio"
        i=$((i + 1))
    done
    # The guest stops starting steps 120 s (guest time) before the limit.
    local pass_args="lab.deadline=$((TIMEOUT - 120))"
    case " ${KARGS[*]} " in *" lab.deadline="*) pass_args="" ;; esac
    cat >"$d/boot/grub/grub.cfg" <<EOF
set timeout=0
set default=0
menuentry "ipivmm lab" {
    linux /boot/vmlinuz console=ttyS0,115200 panic=-1 mitigations=off loglevel=4 $pass_args ${KARGS[*]}
    initrd /boot/initrd.cpio /boot/ata.cpio$extra
}
EOF
    grub-mkrescue -o "$RUN/lab.iso" "$d" >"$RUN/grub-mkrescue.log" 2>&1 ||
        { cat "$RUN/grub-mkrescue.log" >&2; die "grub-mkrescue failed"; }
    rm -rf "$d"
}

bochsrc() {
    local display='display_library: nogui'
    # Debian's 2.7 has no nogui: its VNC server, told not to wait for a client.
    # It also aborts ("buffer overflow detected") when ALSA finds no sound
    # card, unless its sound drivers are the dummies.
    [ "$VER" = 2.7 ] && display='display_library: rfb, options="timeout=0"
sound: waveoutdrv=dummy, waveindrv=dummy, midioutdrv=dummy
speaker: enabled=0'
    # 520 cylinders x 16 heads x 63 sectors: a geometry Bochs takes for a flat image.
    truncate -s $((520 * 16 * 63 * 512)) "$RUN/out.img"
    cat >"$RUN/bochsrc" <<EOF
# Written by scripts/lab/bochs.sh (Bochs $VER)
config_interface: textconfig
$display
memory: guest=$MEM, host=$MEM
romimage: file=/usr/share/bochs/BIOS-bochs-latest
vgaromimage: file=/usr/share/vgabios/vgabios.bin
cpu: model=$CPU, count=$SMP, ips=$IPS, reset_on_triple_fault=1, ignore_bad_msrs=1
clock: sync=none, time0=local
pci: enabled=1, chipset=i440fx
ata0: enabled=1, ioaddr1=0x1f0, ioaddr2=0x3f0, irq=14
ata0-master: type=disk, path="$RUN/out.img", mode=flat, cylinders=520, heads=16, spt=63
ata1: enabled=1, ioaddr1=0x170, ioaddr2=0x370, irq=15
ata1-master: type=cdrom, path="$RUN/lab.iso", status=inserted
boot: cdrom
com1: enabled=1, mode=file, dev="$RUN/serial.log"
mouse: enabled=0
log: "$RUN/bochs.log"
panic: action=fatal
error: action=report
# info: ignore keeps Bochs's own IPS alarm handler (2.7) from ever writing
# to the log (it deadlocks when it interrupts another log write).
info: action=ignore
debug: action=ignore
EOF
}

# Bochs has no -no-reboot: watch the console and stop it once the guest is
# done, panicked or rebooting.
boot() {
    local rc_args=() start=$SECONDS n
    : >"$RUN/serial.log"
    # Debian's 2.7 has its debugger compiled in: tell it to continue.
    local help
    help=$("$BOCHS" --help 2>&1 || true)
    if [[ $help == *"-rc filename"* ]]; then
        echo c >"$RUN/debugger.rc"
        rc_args=(-rc "$RUN/debugger.rc")
    fi
    log "booting $(basename "$VMLINUZ") under Bochs $VER ($CPU, $SMP CPUs, $MEM MiB), at most ${TIMEOUT}s"
    (cd "$RUN" && exec timeout -k 10 "$TIMEOUT" "$BOCHS" -q -f "$RUN/bochsrc" "${rc_args[@]}" </dev/null >"$RUN/bochs.out" 2>&1) &
    BOCHS_PID=$!
    tail -n +1 -F --pid="$BOCHS_PID" "$RUN/serial.log" 2>/dev/null | grep --line-buffered -a '^lab:' >&2 &
    TAIL_PID=$!
    local done_at=""
    while kill -0 "$BOCHS_PID" 2>/dev/null; do
        sleep 2
        if [ -z "$done_at" ]; then
            if grep -qa '^lab: done' "$RUN/serial.log"; then
                done_at=$SECONDS
            elif grep -qa 'Kernel panic' "$RUN/serial.log"; then
                WARNINGS+=("kernel panic in the guest (see console.log)")
                done_at=$SECONDS
            else
                n=$(grep -ca 'Linux version' "$RUN/serial.log" || true)
                if [ "${n:-0}" -gt 1 ]; then
                    WARNINGS+=("the guest rebooted (see console.log)")
                    done_at=$SECONDS
                fi
            fi
        elif [ $((SECONDS - done_at)) -ge 20 ]; then
            kill "$BOCHS_PID" 2>/dev/null || true
        fi
    done
    wait "$BOCHS_PID" && BOCHS_RC=0 || BOCHS_RC=$?
    BOCHS_PID=""
    kill "$TAIL_PID" 2>/dev/null || true
    TAIL_PID=""
    [ "$BOCHS_RC" = 124 ] && WARNINGS+=("Bochs killed after ${TIMEOUT}s")
    log "Bochs ended (rc $BOCHS_RC) after $((SECONDS - start))s"
    return 0
}

collect() {
    local new=$RESULTS.new
    rm -rf "$new"
    mkdir -p "$new"
    tar -xf "$RUN/out.img" -C "$new" 2>/dev/null || WARNINGS+=("no result archive on the output disk")
    cp "$RUN/serial.log" "$new/console.log"
    cp "$RUN/bochsrc" "$RUN/timings.txt" "$new/"
    tail -c 4M "$RUN/bochs.log" >"$new/bochs.log" 2>/dev/null || true
    tail -c 64k "$RUN/bochs.out" >"$new/bochs.out" 2>/dev/null || true
    {
        echo "bochs $VER $BOCHS ($CPU, ips $IPS)"
        [ -e "$(dirname "$BOCHS")/../patches.txt" ] && echo "patches $(paste -sd' ' "$(dirname "$BOCHS")/../patches.txt")"
        echo "kernel $(basename "$VMLINUZ")"
        echo "args ${KARGS[*]}"
    } >"$new/versions.txt"
    : >"$new/warnings.txt"
    [ ${#WARNINGS[@]} -eq 0 ] || printf '%s\n' "${WARNINGS[@]}" >"$new/warnings.txt"
    rm -rf "$RESULTS"
    mv "$new" "$RESULTS"
}

t0=$(date +%s)
timed tools tools
timed initrd initrd
timed modules ata_cpio
timed iso iso
bochsrc
timed boot boot
collect
echo "total $(($(date +%s) - t0))" >>"$RESULTS/timings.txt"
log "results in $RESULTS"
[ $VERIFY = 1 ] || exit 0
pass=quick
case " ${KARGS[*]} " in
*" lab.steps="*) pass=custom ;;
*" lab.pass="*) pass=$(echo " ${KARGS[*]} " | sed 's/.* lab\.pass=\([^ ]*\).*/\1/') ;;
esac
"$LAB/verify.sh" "$pass" "$RESULTS"
