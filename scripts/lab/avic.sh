#!/usr/bin/env bash
# The AVIC pass of the AMD lab: kvm_amd with avic=1 (no force_avic) on QEMU
# TCG's emulated AVIC (scripts/lab/build-qemu.sh: Debian bookworm's QEMU 7.2
# with the patches of scripts/lab/qemu-7.2.series). See docs/lab.md, "AVIC".
#
# Usage: scripts/lab/avic.sh [--parts LIST] [--iterations N] [--update-docs]
#   --parts LIST     boots to run, comma-separated, one boot each (default
#                    selftests,matrix,preset; see scripts/lab/probe-avic.sh)
#   --iterations N   iterations per run (default 20)
#   --update-docs    rewrite the AVIC table in docs/lab.md from this pass
# Each boot runs scripts/lab.sh quick --steps host,extra with
# scripts/lab/probe-avic.sh as step extra; its results land in
# target/lab-avic/results/PART. The checks: scripts/lab/verify-avic.sh.
# Environment: IPIVMM_LAB_CACHE, LAB_SMP, LAB_MEM (as scripts/lab.sh);
# LAB_QEMU: use this QEMU binary instead of building one.
# Exit status: 0 when every check passed, 1 when one failed, 2 on a usage or setup error.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LAB=$ROOT/scripts/lab
ITER=20
PARTS=selftests,matrix,preset
UPDATE_DOCS=0
LAB_NAME=avic-lab
WORK=$ROOT/target/lab-avic
TIMINGS=$WORK/timings.txt
# shellcheck source=common.sh
. "$LAB/common.sh"
while [ $# -gt 0 ]; do
    case $1 in
    --parts) PARTS=$2; shift ;;
    --iterations) ITER=$2; shift ;;
    --update-docs) UPDATE_DOCS=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
for p in ${PARTS//,/ }; do
    case $p in selftests | matrix | preset) ;; *) die "unknown part '$p' (selftests, matrix, preset)" ;; esac
done
mkdir -p "$WORK"
: >"$TIMINGS"
command -v jq >/dev/null || apt_install jq

# The tests of tools/testing/selftests/kvm/x86_64 (Linux 6.1) that touch the
# local APIC: IPIs and ICR writes of every kind (xapic_state_test sends every
# delivery mode to absent vCPUs: AVIC's ID codes 0, 2 and 4), APIC state save
# and restore, SMIs and NMIs sent through the ICR, the nested paths (AVIC
# inhibited), the CMCI LVT (an unaccelerated register), guest debug (an
# inhibit); and two without the APIC as controls.
SELFTESTS="x86_64/xapic_ipi_test x86_64/xapic_state_test x86_64/set_boot_cpu_id x86_64/smm_test
x86_64/state_test x86_64/kvm_pv_test x86_64/debug_regs x86_64/svm_int_ctl_test
x86_64/svm_nested_soft_inject_test x86_64/ucna_injection_test x86_64/sync_regs_test
x86_64/userspace_io_test"

build_qemu() {
    if [ -n "${LAB_QEMU:-}" ]; then QEMU=$LAB_QEMU; else QEMU=$("$LAB/build-qemu.sh"); fi
}
# lab.sh's initrd step fetches the kernel and busybox the selftests archive needs.
prepare() {
    "$ROOT/scripts/lab.sh" initrd >/dev/null
    # shellcheck disable=SC2086 # one line, as build-selftests.sh reads it
    SELFTESTS=$(echo $SELFTESTS) "$LAB/build-selftests.sh" "$LAB/probe-avic.sh" "$WORK/probe.cpio" >/dev/null
}
timed build-qemu build_qemu
timed prepare prepare
log "QEMU: $QEMU"
rc=0
mkdir -p "$WORK/results"
for part in ${PARTS//,/ }; do
    s=$(date +%s)
    LAB_QEMU=$QEMU LAB_EXTRA_CPIO=$WORK/probe.cpio \
        LAB_KERNEL_ARGS="loglevel=4 lab.kvm=avic=1 lab.probe=$part" \
        "$ROOT/scripts/lab.sh" quick --steps host,extra --iterations "$ITER" --timeout 3600 || rc=1
    echo "boot-$part $(($(date +%s) - s))" >>"$TIMINGS"
    rm -rf "$WORK/results/$part"
    cp -r "$ROOT/target/lab/results" "$WORK/results/$part"
done
cp "$TIMINGS" "$WORK/results/timings.txt"
# Each part's boot has its own results directory: checked one by one.
for part in ${PARTS//,/ }; do
    "$LAB/verify-avic.sh" "$WORK/results/$part" || rc=1
done
if [ $UPDATE_DOCS = 1 ]; then
    "$LAB/table-avic.sh" "$WORK/results/matrix" "$ROOT/docs/lab.md" || rc=1
fi
log "results in $WORK/results"
exit $rc
