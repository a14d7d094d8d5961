#!/usr/bin/env bash
# The AVIC pass of the AMD lab: kvm_amd with avic=1 on QEMU TCG's emulated
# AVIC (scripts/lab/build-qemu.sh: Debian bookworm's QEMU 7.2 with
# scripts/lab/qemu-7.2-avic-*.patch). See docs/lab.md, "AVIC".
#
# Usage: scripts/lab/avic.sh [--iterations N] [--no-preset] [--timeout S] [--update-docs]
#   --iterations N   iterations per run (default 30)
#   --no-preset      leave out the avic-broadcast preset (2..180 vCPUs: the longest part)
#   --timeout S      the guest's time limit (default 7200)
#   --update-docs    rewrite the AVIC table in docs/lab.md from this pass
# What runs in the guest: scripts/lab/probe-avic.sh (KVM selftests with AVIC
# on and off, ipivmm's AVIC matrix on and off, the preset). The checks:
# scripts/lab/verify.sh (steps, backend) and scripts/lab/checks-avic.jq.
# Environment: IPIVMM_LAB_CACHE, LAB_SMP, LAB_MEM (as scripts/lab.sh).
# Exit status: 0 when every check passed, 1 when one failed, 2 on a usage or setup error.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LAB=$ROOT/scripts/lab
ITER=30
PRESET=1
TIMEOUT=7200
UPDATE_DOCS=0
LAB_NAME=avic-lab
TIMINGS=$ROOT/target/lab-avic/timings.txt
# shellcheck source=common.sh
. "$LAB/common.sh"
while [ $# -gt 0 ]; do
    case $1 in
    --iterations) ITER=$2; shift ;;
    --no-preset) PRESET=0 ;;
    --timeout) TIMEOUT=$2; shift ;;
    --update-docs) UPDATE_DOCS=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
WORK=$ROOT/target/lab-avic
mkdir -p "$WORK"
: >"$TIMINGS"
command -v jq >/dev/null || apt_install jq

# The tests of tools/testing/selftests/kvm/x86_64 (Linux 6.1) that touch the
# local APIC: IPIs, APIC state save/restore, SMIs and NMIs sent through the
# ICR, the nested (AVIC-inhibited) paths, the CMCI LVT (an unaccelerated
# register), guest debug (an inhibit); and two without the APIC as controls.
SELFTESTS="x86_64/xapic_ipi_test x86_64/xapic_state_test x86_64/set_boot_cpu_id x86_64/smm_test
x86_64/state_test x86_64/kvm_pv_test x86_64/debug_regs x86_64/svm_int_ctl_test
x86_64/svm_nested_soft_inject_test x86_64/ucna_injection_test x86_64/sync_regs_test
x86_64/userspace_io_test"

build_qemu() { QEMU=$("$LAB/build-qemu.sh"); }
# lab.sh's initrd step fetches the kernel and busybox the selftests archive needs.
prepare() {
    "$ROOT/scripts/lab.sh" initrd >/dev/null
    SELFTESTS=$(echo $SELFTESTS) "$LAB/build-selftests.sh" "$LAB/probe-avic.sh" "$WORK/probe.cpio" >/dev/null
}
timed build-qemu build_qemu
timed prepare prepare
log "QEMU: $QEMU"
args="loglevel=4 lab.kvm=avic=1"
[ $PRESET = 0 ] && args="$args lab.preset=0"
rc=0
s=$(date +%s)
LAB_QEMU=$QEMU LAB_CPIO=$WORK/probe.cpio LAB_KERNEL_ARGS=$args \
    "$ROOT/scripts/lab.sh" quick --steps host,extra --iterations "$ITER" --timeout "$TIMEOUT" || rc=1
echo "lab $(($(date +%s) - s))" >>"$TIMINGS"
R=$ROOT/target/lab/results
rm -rf "$WORK/results"
cp -r "$R" "$WORK/results"
cp "$TIMINGS" "$WORK/results/avic-timings.txt"
"$LAB/verify-avic.sh" "$WORK/results" || rc=1
if [ $UPDATE_DOCS = 1 ]; then
    "$LAB/table-avic.sh" "$WORK/results" "$ROOT/docs/lab.md" || rc=1
fi
log "results in $WORK/results"
exit $rc
