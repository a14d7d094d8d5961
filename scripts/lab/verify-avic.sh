#!/usr/bin/env bash
# Checks the AVIC pass's results (scripts/lab/avic.sh): the steps and the
# backend (scripts/lab/verify.sh), AVIC read back as usable, the KVM selftests
# with AVIC on and off, and ipivmm's AVIC runs (scripts/lab/checks-avic.jq).
# Usage: scripts/lab/verify-avic.sh RESULTS_DIR      exit 0 only if all passed
set -uo pipefail
dir=$1
LAB=$(cd "$(dirname "$0")" && pwd)
failed=0
checks=0
ok() { checks=$((checks + 1)); printf '  PASS  %s\n' "$1"; }
bad() { checks=$((checks + 1)); failed=$((failed + 1)); printf '  FAIL  %s\n' "$1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/        /' | head -n 20; }
check() { # name, jq filter yielding offending lines, files...
    local name=$1 filter=$2 out
    shift 2
    [ $# -gt 0 ] && [ -e "$1" ] || { bad "$name: no results file"; return; }
    out=$(jq -r -L "$LAB" "include \"checks\"; include \"checks-avic\"; $filter" "$@" 2>&1)
    if [ -z "$out" ]; then ok "$name"; else bad "$name" "$out"; fi
}

echo "avic lab: $dir"
# The generic checks of a custom pass: steps exited 0, a hardware KVM backend.
generic=$("$LAB/verify.sh" custom "$dir")
grc=$?
echo "$generic" | sed -n '2,$p' | grep -v '^lab: [0-9]*/[0-9]* checks passed'
[ $grc = 0 ] && ok "scripts/lab/verify.sh custom" || bad "scripts/lab/verify.sh custom (above)"

p=$dir/module-params.txt
if grep -qx 'kvm_amd.avic=Y' "$p" 2>/dev/null && grep -qx 'kvm_amd.force_avic=N' "$p"; then
    ok "kvm_amd loaded with avic=1 reads avic=Y (force_avic=N)"
else
    bad "kvm_amd avic=Y without force_avic" "$(grep -E 'avic|npt' "$p" 2>/dev/null)"
fi
v=$(jq -r '(.host.verdicts // .verdicts).avic.state // empty' "$dir/host-avic.json" 2>/dev/null)
[ "$v" = available ] && ok "ipivmm host: AVIC usable" ||
    bad "ipivmm host: AVIC usable" "$(grep -E 'AVIC' "$dir/host-avic.txt" 2>/dev/null)"

if [ -s "$dir/selftests.tsv" ]; then
    for avic in on off; do
        total=$(awk -v a=$avic '$2 == a' "$dir/selftests.tsv" | wc -l)
        bads=$(awk -v a=$avic '$2 == a && $3 != 0 { print $1 " rc=" $3 }' "$dir/selftests.tsv")
        if [ "$total" -gt 0 ] && [ -z "$bads" ]; then
            ok "KVM selftests with AVIC $avic: $total of $total passed"
        else
            bad "KVM selftests with AVIC $avic ($total run)" "$bads"
        fi
    done
elif grep -q 'selftests' <<<"$(cat "$dir/extra.log" 2>/dev/null)"; then
    bad "KVM selftests ran" "no selftests.tsv"
fi

on=()
for f in "$dir"/runs/avic-on*.json "$dir"/runs/avic-preset.json; do [ -e "$f" ] && on+=("$f"); done
off=()
for f in "$dir"/runs/avic-off*.json; do [ -e "$f" ] && off+=("$f"); done
if [ ${#on[@]} -gt 0 ]; then
    check "AVIC runs completed" 'failed_runs' "${on[@]}"
    check "AVIC active in every in-kernel-LAPIC run with --apicv host, inhibited with --apicv inhibit" 'avic_on_mismatch' "${on[@]}"
    check "every IPI sent was delivered (AVIC on)" 'lost_ipis' "${on[@]}"
    check "ICR-write exits (kvm_apic:icr_write + incomplete - busy) == the exits KVM took (0x401 xAPIC, MSR x2APIC); the rest accelerated" 'icr_accounting_mismatch' "${on[@]}"
    check "A7: unicast to a running target accelerated (no exit)" 'a7_mismatch' "${on[@]}"
    check "A8: unicast to a halted target: AVIC_INCOMPLETE_IPI, no kvm_apic/kvm_apic_ipi" 'a8_mismatch' "${on[@]}"
    check "A5: hybrid AVIC (x2APIC): every IPI through kvm_apicv_accept_irq" 'a5_mismatch' "${on[@]}"
    jq -r -L "$LAB" 'include "checks"; include "checks-avic"; avic_summary' "${on[@]}" | sed 's/^/  avic: /'
fi
if [ ${#off[@]} -gt 0 ]; then
    check "AVIC-off runs completed" 'failed_runs' "${off[@]}"
    check "no APICv with avic=0" 'avic_off_mismatch' "${off[@]}"
    check "every IPI sent was delivered (AVIC off)" 'lost_ipis' "${off[@]}"
    check "ICR-write exits == ICR writes (AVIC off)" 'icr_exit_mismatch' "${off[@]}"
fi
echo "avic lab: $((checks - failed))/$checks checks passed$([ $failed -gt 0 ] && echo ", $failed FAILED")"
[ $failed -eq 0 ]
