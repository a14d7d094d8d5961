#!/usr/bin/env bash
# Checks a lab pass's results (scripts/lab.sh unpacks them into a directory)
# and prints one line per check and a summary. Exit 0 only if all passed.
# Usage: scripts/lab/verify.sh PASS RESULTS_DIR
set -uo pipefail
pass=$1
dir=$2
LAB=$(cd "$(dirname "$0")" && pwd)
failed=0
checks=0
ok() { checks=$((checks + 1)); printf '  PASS  %s\n' "$1"; }
bad() { checks=$((checks + 1)); failed=$((failed + 1)); printf '  FAIL  %s\n' "$1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/        /' | head -n 20; }
check() { # name, jq filter over one results file that yields offending lines, files...
    local name=$1 filter=$2 out
    shift 2
    [ $# -gt 0 ] || { bad "$name: no results file"; return; }
    out=$(jq -r -L "$LAB" "include \"checks\"; $filter" "$@" 2>&1)
    if [ -z "$out" ]; then ok "$name"; else bad "$name" "$out"; fi
}

echo "lab $pass pass: $dir"
if [ ! -s "$dir/steps.tsv" ]; then
    bad "the guest ran its steps" "$(tail -n 30 "$dir/console.log" 2>/dev/null)"
else
    expected=()
    [ "$pass" = custom ] || expected=(host sweep inhibit-repeats hostswitch sweep-npt0)
    [ "$pass" = full ] && expected+=(sweep-halt preset-avic-broadcast preset-ipiv-unicast preset-apicv-topology inhibit-repeats-loaded)
    for s in "${expected[@]}"; do
        grep -q "^$s	" "$dir/steps.tsv" || bad "step $s ran" "missing from steps.tsv"
    done
    while IFS=$'\t' read -r name rc secs; do
        case $name in test-*) continue ;; esac
        if [ "$rc" = 0 ]; then ok "step $name (${secs}s)"; else bad "step $name: exit $rc (${secs}s)" "$(tail -n 8 "$dir/$name.log" 2>/dev/null)"; fi
    done <"$dir/steps.tsv"
fi

backend=$(jq -r '.host.backend // .backend // empty' "$dir/host.json" 2>/dev/null)
[ "$pass" = custom ] && [ ! -e "$dir/host.json" ] && backend=skip
case $backend in
skip) ;;
KvmAmd | KvmIntel | kvm_amd | kvm_intel) ok "hardware KVM backend in the guest: $backend" ;;
*) bad "hardware KVM backend in the guest" "ipivmm host says '${backend:-nothing}'" ;;
esac

runs=("$dir"/runs/sweep*.json "$dir"/runs/preset-*.json)
existing=()
for f in "${runs[@]}"; do [ -e "$f" ] && existing+=("$f"); done
[ ${#existing[@]} -gt 0 ] || [ "$pass" != custom ] && {
check "every run of every sweep completed" 'failed_runs' "${existing[@]}"
check "nothing skipped that this host can run" 'unexpected_skips' "${existing[@]}"
check "exits counted by reason (kvm_exit) per vCPU and phase" 'missing_exit_reasons' "${existing[@]}"
check "sampled exits == kvm_exit counter == KVM exits stat" 'sampled_exit_mismatch' "${existing[@]}"
check "ICR-write exits == ICR writes on every sender (icr, no APICv)" 'icr_exit_mismatch' "${existing[@]}"
check "PV: hypercall exits == hypercalls, 0 ICR-write exits, none counted accelerated" 'pv_mismatch' "${existing[@]}"
check "every IPI sent was delivered" 'lost_ipis' "${existing[@]}"
check "headline metrics: IPIs per operation = fan-out, ICR-write exits per operation 1 (ICR) / 0 (PV)" 'metrics_mismatch' "${existing[@]}"
check "APICv inhibit events agree with the host verdict" 'apicv_observed_mismatch' "${existing[@]}"
}
if grep -q "^hostswitch	" "$dir/steps.tsv" 2>/dev/null; then
    hp=()
    [ -e "$dir/runs/sweep-hostparam.json" ] && hp=("$dir/runs/sweep-hostparam.json")
    check "sweep --host-param: both settings ran, each reads back as asked" 'host_param_sweep' "${hp[@]}"
fi
if [ -e "$dir/runs/flood-lost.json" ]; then
    check "exit flood: lost records reported, never more exits than KVM's stat" 'flood_lost_mismatch' "$dir/runs/flood-lost.json"
    jq -r -L "$LAB" 'include "checks"; flood_summary' "$dir/runs/flood-lost.json" | sed 's/^/  flood: /'
fi
overhead=("$dir"/runs/overhead-*.json)
if [ -e "${overhead[0]}" ]; then
    check "overhead: every run and every run of its pairs completed (${#overhead[@]} runs)" 'overhead_failures' "${overhead[@]}"
    check "overhead: exits by reason (bpf, sampled) == kvm_exit counter == KVM exits stat" 'sampled_exit_mismatch' "${overhead[@]}"
    for f in "${overhead[@]}"; do
        jq -r -L "$LAB" 'include "checks"; overhead_summary' "$f" | sed 's/^/  cost of counting: /'
    done
fi
inhibit=("$dir"/runs/inhibit-*.json)
[ -e "${inhibit[0]}" ] && check "--apicv inhibit runs completed (${#inhibit[@]} runs)" 'failed_runs' "${inhibit[@]}"

tests_expected=1
[ "$pass" = custom ] && ! grep -q "^test-" "$dir/steps.tsv" 2>/dev/null && tests_expected=0
for t in "$dir"/tests/*.txt; do
    [ -e "$t" ] || { [ $tests_expected = 0 ] || bad "KVM test binaries ran" "no output in $dir/tests"; break; }
    n=$(basename "$t" .txt)
    summary=$(grep -E '^test result:' "$t" | tail -n 1)
    if [[ $summary == "test result: ok."* ]]; then
        ok "tests $n: ${summary#test result: ok. }"
    else
        bad "tests $n: ${summary:-no result (crashed or timed out)}" "$(grep -E '^(test .* FAILED|---- |thread .* panicked|SKIP)' "$t" | head -n 10)"
    fi
done

if [ -s "$dir/retried.txt" ]; then
    echo "test binaries that failed once and ran again (first attempt in tests/NAME.first-attempt.log):"
    sed 's/^/  /' "$dir/retried.txt"
fi
if [ -s "$dir/warnings.txt" ]; then
    echo "warnings:"
    sed 's/^/  /' "$dir/warnings.txt"
fi
if [ -s "$dir/timings.txt" ]; then
    echo "wall times (s): $(tr '\n' ' ' <"$dir/timings.txt")"
fi
echo "lab: $((checks - failed))/$checks checks passed$([ $failed -gt 0 ] && echo ", $failed FAILED")"
[ $failed -eq 0 ]
