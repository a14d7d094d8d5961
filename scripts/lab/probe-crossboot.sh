#!/bin/sh
# The crossboot pass's step `extra` in the lab's guest (`cargo xtask lab
# crossboot`, docs/lab.md "Kernels compared across boots"): one boot of one
# side (kvm_amd loaded with that side's lab.kvm=), recorded as a kernel CI
# records it: scripts/ci/kernel-gate.sh (packed as /lab/kernel-gate.sh)
# `record $OUT/recordings`, its RECORDINGS runs of the same configuration.
# lab.iterations=N: iterations per run. The host judges the boots'
# recordings afterwards with the same script's `judge`.
export PATH=/bin:/lab/bin
OUT=${OUT:-/out}
arg() { sed -n "s/.*\blab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
save_partial() { [ -b "${DISK:-}" ] && (cd "$OUT" && tar -cf "$DISK" .) && sync; }
echo "== kvm_amd: avic=$(cat /sys/module/kvm_amd/parameters/avic) boot_id $(cat /proc/sys/kernel/random/boot_id)"
echo "lab: probe: kernel-gate.sh record" >/dev/console
ITERATIONS=$(arg iterations) sh /lab/kernel-gate.sh record "$OUT/recordings"
rc=$?
for f in "$OUT"/recordings/*.txt; do
    echo "== $f"
    tail -n 12 "$f"
done
save_partial
echo "probe-crossboot: kernel-gate.sh record: exit $rc"
exit $rc
