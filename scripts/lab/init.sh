#!/bin/busybox sh
# PID 1 of the lab's guest (cargo xtask lab, xtask/src/lab/): a Debian kernel
# under QEMU TCG with an emulated SVM CPU (or Bochs with VMX). Loads the real
# kvm_amd/kvm_intel, runs the pass named on the kernel command line
# (lab.pass=quick|full|shell), and writes every result as a tar archive onto
# the raw disk (/dev/vda, or the ATA disk), which the host unpacks. Each
# step's exit status goes to steps.tsv; nothing here decides pass or fail
# (the host's verdict does: xtask/src/lab/verify.rs, with plans/lab-*.toml).
export PATH=/bin:/lab/bin HOME=/root TERM=dumb OUT=/out
arg() { sed -n "s/.*\blab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
say() { echo "lab: $*"; }

# Kernel modules in dependency order (the host resolved them from each
# module's .modinfo and wrote this list; the Bochs lab adds the ATA disk's in
# order.extra).
load_modules() { # $@: extra parameters for the vendor module
    cat /lab/modules/order /lab/modules/order.extra 2>/dev/null | while read -r mod; do
        case $mod in
        kvm-amd | kvm-intel) continue ;;
        esac
        insmod "/lab/modules/$mod.ko" 2>/dev/null || true
    done
    if grep -qw svm /proc/cpuinfo; then VENDOR=kvm-amd; else VENDOR=kvm-intel; fi
    insmod "/lab/modules/$VENDOR.ko" "$@"
}

# One step: a name, a timeout in seconds, then the command. Output goes to
# $OUT/<name>.log, the verdict to steps.tsv and a marker line to the console.
# Steps past the pass's deadline (lab.deadline, seconds since boot) are not
# started, and no step runs beyond it: results of finished steps always get out.
step() {
    name=$1 limit=$2
    shift 2
    now=$(cut -d. -f1 /proc/uptime)
    left=$((DEADLINE - now))
    if [ "$left" -le 0 ]; then
        printf '%s\t%s\t%s\n' "$name" deadline 0 >>$OUT/steps.tsv
        say "step $name: not started, past the pass's deadline"
        return 0
    fi
    # A reboot after a wedge resumes after the steps that finished.
    case ",$(arg done)," in
    *",$name,"*)
        say "step $name: done in an earlier boot"
        return 0
        ;;
    esac
    [ "$limit" -gt "$left" ] && limit=$left
    # Tests of the host's watchdog and resume (first boot only):
    # lab.wedge_at=STEP: the heartbeat stops and user space sleeps, as in a
    # real wedge; lab.panic_at=STEP: the kernel panics (sysrq's crash);
    # lab.fail_at=STEP: the step's command fails at once (a test binary's
    # first attempt, so its retry runs: lab.panic_at=test-X-retry after it).
    if [ "$(arg boot)" = 1 ]; then
        if [ "$(arg wedge_at)" = "$name" ]; then
            say "step $name: wedging on request (lab.wedge_at)"
            kill "$HEARTBEAT_PID"
            while :; do sleep 3600; done
        fi
        if [ "$(arg panic_at)" = "$name" ]; then
            say "step $name: panicking on request (lab.panic_at)"
            echo c >/proc/sysrq-trigger
        fi
        if [ "$(arg fail_at)" = "$name" ]; then
            say "step $name: failing on request (lab.fail_at)"
            set -- false
        fi
    fi
    say "step $name: $*"
    start=$(date +%s)
    # Its own session (through /init again, so shell functions can be steps),
    # so a timeout can stop the whole tree after saying where it was stuck.
    setsid /init __fn "$@" >"$OUT/$name.log" 2>&1 &
    pid=$!
    # Wall time from the clock, not from counting sleeps: a loaded emulator
    # stretches every `sleep 1`.
    until=$(($(date +%s) + limit))
    timed_out=0
    while kill -0 $pid 2>/dev/null; do
        if [ "$(date +%s)" -ge $until ]; then
            timed_out=1
            say "step $name: timed out after ${limit}s; stacks in $name.log"
            stacks >>"$OUT/$name.log" 2>&1
            kill -TERM -$pid 2>/dev/null
            sleep 5
            kill -KILL -$pid 2>/dev/null
            break
        fi
        sleep 1
    done
    wait $pid
    rc=$?
    [ $timed_out = 1 ] && rc=124
    secs=$(($(date +%s) - start))
    printf '%s\t%s\t%s\n' "$name" "$rc" "$secs" >>$OUT/steps.tsv
    say "step $name: rc=$rc in ${secs}s"
    save
    return 0
}

# Where every user thread is, for a step that timed out.
stacks() {
    echo "=== lab: threads of every user process at the timeout"
    for t in /proc/[0-9]*/task/[0-9]*; do
        [ -s "${t%/task/*}/cmdline" ] || continue
        echo "--- $(tr '\0' ' ' <"${t%/task/*}/cmdline" | cut -c1-100) [tid ${t##*/} $(cat "$t/comm")] wchan=$(cat "$t/wchan" 2>/dev/null)"
        cat "$t/stack" 2>/dev/null
    done
}

# Every KVM integration-test binary, with every skip turned into a failure.
run_tests() { # $1: label (suffix of the output names)
    for t in /lab/tests/*; do
        n=$(basename "$t")
        IPIVMM_REQUIRE_KVM=1 IPIVMM_REQUIRE_HW_KVM=1 IPIVMM_LIFECYCLE_CYCLES=20 \
            IPIVMM_EXAMPLE_PAYLOAD=$(cat /lab/example-payload) \
            step "test-$n$1" 600 "$t" --test-threads=1 $(cat /lab/tests.skip)
        [ -e "$OUT/test-$n$1.log" ] || continue
        # Once more after a failure: under TCG a nested guest now and then
        # faults or stalls (docs/lab.md, "Open"). Both attempts are kept and
        # the verdict lists every retried binary.
        if ! grep -q '^test result: ok' "$OUT/test-$n$1.log"; then
            mv "$OUT/test-$n$1.log" "$OUT/tests/$n$1.first-attempt.log"
            echo "$n$1" >>"$OUT/retried.txt"
            # Out before the retry: a boot that ends during it keeps the
            # failed first attempt (the host then runs the binary again
            # from its first attempt: xtask/src/lab/boot.rs, rerun_of).
            save
            IPIVMM_REQUIRE_KVM=1 IPIVMM_REQUIRE_HW_KVM=1 IPIVMM_LIFECYCLE_CYCLES=20 \
                IPIVMM_EXAMPLE_PAYLOAD=$(cat /lab/example-payload) \
                step "test-$n$1-retry" 600 "$t" --test-threads=1 $(cat /lab/tests.skip)
            [ -e "$OUT/test-$n$1-retry.log" ] && mv "$OUT/test-$n$1-retry.log" "$OUT/test-$n$1.log"
        fi
        mv "$OUT/test-$n$1.log" "$OUT/tests/$n$1.txt"
        grep -E '^test result:' "$OUT/tests/$n$1.txt" | sed "s/^/lab:   $n: /"
    done
}

host_facts() { ipivmm host >"$OUT/host.txt" && ipivmm host --json >"$OUT/host.json"; }

# A plan of plans/ with `ipivmm check` (docs/ci.md), as step $1: TAP into
# $OUT/$1.tap (the host's verdict reads it: xtask/src/lab/tap.rs), JUnit
# beside it, each experiment's results in runs/$1/. The lab's own plans
# (plans/lab-*.toml) hold the sweeps and the invariants they must satisfy;
# plans/kvm-paths.toml the counting invariants any KVM host must satisfy
# (docs/kernel-paths.md). The host carries plans/ in /lab/plans; a tree
# without the plan has nothing to run and the verdict says so.
check_plan() { # $1: step name, $2: plan file in /lab/plans, $3: iterations (lab plans)
    name=$1 plan=/lab/plans/$2
    if [ ! -e "$plan" ]; then
        echo "no $plan: the tree the lab was built from has no plans/$2"
        return 0
    fi
    # $3 (lab.iterations=N; the full pass's 100 for lab-sweep.toml under
    # npt=0): every line's --iterations, in a copy of the plan.
    if [ -n "${3:-}" ]; then
        sed "s/--iterations [0-9]*/--iterations $3/" "$plan" >"/tmp/$2"
        plan=/tmp/$2
    fi
    mkdir -p "$OUT/runs/$name"
    ipivmm check "$plan" --junit "$OUT/$name.junit.xml" --json-dir "$OUT/runs/$name" >"$OUT/$name.tap" &&
        return 0
    # Once more after a failure, as a test binary is: under TCG a nested guest
    # now and then faults (a spurious #PF becomes a triple fault: docs/lab.md,
    # "Open"). The first attempt is kept out of runs/, and the verdict lists
    # the retry; a real failure fails twice.
    rm -rf "$OUT/$name.first-attempt"
    mkdir -p "$OUT/$name.first-attempt"
    mv "$OUT/$name.tap" "$OUT/runs/$name" "$OUT/$name.first-attempt/"
    mv "$OUT/$name.junit.xml" "$OUT/$name.first-attempt/" 2>/dev/null
    echo "$name (first attempt in $name.first-attempt/)" >>$OUT/retried.txt
    # Out before the second: a boot that ends during it keeps the first.
    save
    mkdir -p "$OUT/runs/$name"
    ipivmm check "$plan" --junit "$OUT/$name.junit.xml" --json-dir "$OUT/runs/$name" >"$OUT/$name.tap"
}

# Repeats of the configuration that once hung, alone and beside two busy loops.
inhibit_repeats() { # $1: runs per APIC mode
    fails=0
    for apic in x2apic xapic; do
        for i in $(seq "$1"); do
            if ! ipivmm run --repeat 1 --apic "$apic" --apicv inhibit --target halt --iterations 50 \
                --warmup 5 --serial none -q --timeout 60 --json "$OUT/runs/inhibit-$apic-$i.json"; then
                echo "run $apic #$i failed"
                fails=$((fails + 1))
            fi
        done
    done
    echo "inhibit repeats: $fails failed of $(($1 * 2))"
    [ $fails -eq 0 ]
}

# The VM test binaries again and again (hunting rare hangs; not in a pass).
stress_tests() { # $1: rounds
    for i in $(seq "$1"); do
        for t in /lab/tests/pingpong /lab/tests/modes /lab/tests/guest_faults; do
            echo "round $i: $t"
            IPIVMM_REQUIRE_KVM=1 "$t" --test-threads=1 -q 2>&1 | tail -n 2 || return 1
        done
    done
}

under_load() { # $@: command, run beside one busy loop per CPU
    pids=""
    for _ in $(seq "$(nproc)"); do
        sh -c 'while :; do :; done' &
        pids="$pids $!"
    done
    "$@"
    rc=$?
    kill $pids
    return $rc
}

# modprobe for ipivmm's host switches: busybox's modprobe reads
# /lib/modules/<release>/modules.dep, which depmod writes from the lab's
# modules (hard links, no copies).
setup_modprobe() {
    d=/lib/modules/$(uname -r)
    mkdir -p "$d"
    for f in /lab/modules/*.ko; do ln -f "$f" "$d/" 2>/dev/null || cp "$f" "$d/"; done
    depmod
}

# Host switches for real (ipivmm host --set/--restore, sweep --host-param)
# on kvm_amd: npt=0 is honoured, avic=1 with npt=0 reads back N (AVIC needs
# nested paging), avic=1 alone what the CPU allows (the lab's QEMU has AVIC);
# refused while a VM runs; restored by --restore, at the end of a sweep,
# after a SIGTERM during a reload, and (by --restore) after a kill -9.
host_switch() {
    P=/sys/module/kvm_amd/parameters
    S=/run/ipivmm/module-switch.json
    [ -d $P ] || { echo "hostswitch: kvm_amd is not loaded"; return 1; }
    fails=0
    npt0=$(cat $P/npt) avic0=$(cat $P/avic)
    echo "original: npt=$npt0 avic=$avic0"
    hs_set_and_restore
    hs_refused_while_a_vm_runs
    hs_sweep
    hs_sweep_avic
    hs_signal_during_reload
    hs_kill9
    echo "after: npt=$(cat $P/npt) avic=$(cat $P/avic); $fails checks failed"
    [ $fails -eq 0 ]
}

expect() { # description, command...: one line per check, failures counted
    d=$1
    shift
    if "$@"; then echo "ok: $d"; else echo "FAIL: $d"; fails=$((fails + 1)); fi
}

originals_back() { [ "$(cat $P/npt)" = "$npt0" ] && [ "$(cat $P/avic)" = "$avic0" ] && [ ! -e $S ]; }

hs_set_and_restore() {
    echo "=== host --set kvm_amd.npt=0,kvm_amd.avic=1"
    ipivmm host --set kvm_amd.npt=0,kvm_amd.avic=1 >/tmp/set.txt 2>&1
    rc=$?
    cat /tmp/set.txt
    expect "host --set exits 0" [ $rc = 0 ]
    expect "npt reads back N" [ "$(cat $P/npt)" = N ]
    expect "avic=1 reads back N and is reported as a mismatch" grep -q "mismatch: kvm_amd.avic: asked 1, kernel reports N" /tmp/set.txt
    expect "the state file records the originals" grep -q "\"npt\": \"$npt0\"" $S
    ipivmm host >/dev/null 2>/tmp/host.txt
    cat /tmp/host.txt
    # Lines for people wrap at 120 columns: read the warning as one line.
    expect "ipivmm host warns that the switch is pending" sh -c "tr '\n' ' ' </tmp/host.txt | tr -s ' ' | grep -q 'without restoring.*ipivmm host --restore'"
    echo "=== host --restore"
    ipivmm host --restore
    expect "host --restore puts npt=$npt0 avic=$avic0 back and removes the state file" originals_back
    ipivmm host --restore
    expect "a second --restore has nothing to do" [ $? = 0 ]
}

start_vm() { # a VM that runs until stopped (hours under TCG); waits until KVM lists it
    ipivmm run --repeat 1 --iterations 1000000 --timeout 600 --serial none -q --no-tracepoints &
    VM=$!
    for _ in $(seq 120); do
        ls /sys/kernel/debug/kvm 2>/dev/null | grep -q '^[0-9]*-[0-9]*$' && return 0
        kill -0 $VM 2>/dev/null || break
        sleep 1
    done
    echo "no VM appeared in /sys/kernel/debug/kvm"
    return 1
}

stop_vm() { kill -TERM $VM 2>/dev/null; wait $VM; }

hs_refused_while_a_vm_runs() {
    echo "=== refusals while a VM runs"
    expect "a VM started" start_vm
    ipivmm host --set kvm_amd.npt=0 2>/tmp/refused.txt
    rc=$?
    cat /tmp/refused.txt
    expect "host --set refused with exit 2, naming the VM" sh -c "[ $rc = 2 ] && grep -q 'VMs are running (pid $VM (ipivmm)' /tmp/refused.txt"
    ipivmm sweep --repeat 1 --host-param kvm_amd.npt=1,0 --workload pingpong --irqchip kernel --apic x2apic \
        --iterations 20 -q --json /tmp/refused.json 2>/tmp/refused.txt
    rc=$?
    cat /tmp/refused.txt
    expect "sweep --host-param refused with exit 2 before any run" sh -c "[ $rc = 2 ] && [ ! -e /tmp/refused.json ] && [ \$(wc -l </tmp/refused.txt) = 1 ]"
    ipivmm host --set kvm_amd.no_such_param=1 2>/tmp/refused.txt
    rc=$?
    cat /tmp/refused.txt
    expect "a parameter kvm_amd lacks is refused, listing those it has" sh -c "[ $rc = 2 ] && grep -q 'has no parameter .no_such_param. (this kernel has: .*npt' /tmp/refused.txt"
    stop_vm
    expect "nothing changed" originals_back
}

hs_sweep() {
    echo "=== sweep --host-param kvm_amd.npt=1,0"
    ipivmm sweep --repeat 1 --host-param kvm_amd.npt=1,0 --workload pingpong --irqchip kernel --apic x2apic \
        --iterations "${ITER:-20}" --warmup 3 --json $OUT/runs/sweep-hostparam.json \
        --expect 'ipis_delivered == ipis_sent' --expect '@warmup: ipis_delivered == ipis_sent' \
        --expect 'ipis_per_operation == fan_out' --expect 'icr_write_exits_per_operation <= 1' \
        --expect 'ipi=icr apicv=inhibited|unavailable: icr_write_exits_per_operation == 1' \
        --expect 'ipi=icr apicv=inhibited|unavailable: vcpu*.phase.icr_write_exits == vcpu*.guest.icr_writes + vcpu*.guest.barrier_icr_writes' \
        --expect 'vcpu*.exit_reasons.missing == vcpu*.exit_reasons.lost' --expect 'recorded.* == *'
    expect "sweep exits 0" [ $? = 0 ]
    j=$OUT/runs/sweep-hostparam.json
    expect "both settings recorded" sh -c "grep -q '\"host_param\": \"kvm_amd.npt=1\"' $j && grep -q '\"host_param\": \"kvm_amd.npt=0\"' $j"
    expect "the module is back to npt=$npt0 avic=$avic0, no state file" originals_back
}

hs_sweep_avic() {
    # On the lab's QEMU the CPU has AVIC (the avic flag) and avic=1 takes;
    # on one without it (LAB_QEMU=qemu-system-x86_64) kvm_amd refuses it and
    # reads back N, which the sweep must say.
    if grep -qw avic /proc/cpuinfo; then want=Y; else want=N; fi
    echo "=== sweep --host-param kvm_amd.avic=0,1 (the CPU's avic flag: avic=1 reads back $want)"
    ipivmm sweep --repeat 1 --host-param kvm_amd.avic=0,1 --workload pingpong --irqchip kernel --apic x2apic \
        --ipi icr --iterations 20 -q --json $OUT/runs/hostswitch-avic.json 2>/tmp/avic.txt
    rc=$?
    cat /tmp/avic.txt
    j=$OUT/runs/hostswitch-avic.json
    expect "sweep exits 0" [ $rc = 0 ]
    if [ $want = N ]; then
        expect "avic=1 is warned about as read back N" grep -q "warning: --host-param kvm_amd.avic=1: kvm_amd.avic: asked 1, kernel reports N" /tmp/avic.txt
        expect "both runs (and the fingerprint) record avic=N as read back" sh -c "[ \$(grep -c '\"avic\": \"N\"' $j) -ge 3 ]"
    else
        expect "avic=1 took: no read-back warning" sh -c "! grep -q 'asked 1, kernel reports' /tmp/avic.txt"
        expect "the runs record avic=N and avic=Y as read back" sh -c "grep -q '\"avic\": \"Y\"' $j && grep -q '\"avic\": \"N\"' $j"
    fi
    expect "the module is back to npt=$npt0 avic=$avic0, no state file" originals_back
}

hs_signal_during_reload() {
    echo "=== SIGTERM while the module is being reloaded"
    ipivmm sweep --repeat 1 --host-param kvm_amd.npt=0,1 --workload pingpong --irqchip kernel --apic x2apic \
        --iterations 20 -q --json $OUT/runs/hostswitch-sigterm.json &
    pid=$!
    # Until the module is gone (mid-reload), for at most 120 s.
    read -r up _ </proc/uptime
    until=$((${up%.*} + 120))
    while [ -d /sys/module/kvm_amd ]; do
        read -r up _ </proc/uptime
        [ "${up%.*}" -gt $until ] && break
    done
    kill -TERM $pid
    echo "SIGTERM sent (kvm_amd $([ -d /sys/module/kvm_amd ] && echo loaded || echo unloaded) at that moment)"
    wait $pid
    rc=$?
    expect "the cancelled sweep exits 143 (128 + SIGTERM)" [ $rc = 143 ]
    expect "npt=$npt0 avic=$avic0 back, no state file" originals_back
    grep -o '"reason": "not run: sweep cancelled"' $OUT/runs/hostswitch-sigterm.json | head -n 1
}

hs_kill9() {
    echo "=== kill -9 after the switch, then host --restore"
    ipivmm sweep --repeat 1 --host-param kvm_amd.npt=0 --workload pingpong --irqchip kernel --apic x2apic \
        --iterations 100000 --timeout 300 -q &
    pid=$!
    for _ in $(seq 120); do
        kill -0 $pid 2>/dev/null || break
        [ "$(cat $P/npt 2>/dev/null)" = N ] && ls /sys/kernel/debug/kvm 2>/dev/null | grep -q '^[0-9]*-' && break
        sleep 1
    done
    kill -KILL $pid
    wait $pid
    expect "after kill -9: npt still N, the state file left" sh -c "[ \$(cat $P/npt) = N ] && [ -s $S ]"
    sleep 1
    ipivmm host >/dev/null 2>/tmp/host.txt
    cat /tmp/host.txt
    expect "ipivmm host names the pending restore" grep -q "ended without restoring" /tmp/host.txt
    ipivmm host --restore
    expect "host --restore after a crash: npt=$npt0 avic=$avic0 back" originals_back
}

# The cost of counting on this kvm_amd, every mechanism in one boot: for
# x2APIC and xAPIC ping-pong to a halted and to a spinning target, each
# mechanism (--exit-reasons bpf, sampled, counters, off) against the same
# runs with every counter detached (--observer-effect: alternated pairs in
# one process). lab.overhead_pairs=N sets the pairs, lab.overhead_rounds=N repeats it all (hunting the sampled
# run's hang); every run is watched (watch_run) and one that stalls leaves
# its threads' kernel stacks in the log. A failed run is listed, the rest
# still run; its JSON is written all the same (ipivmm does).
overhead() { # $1: pairs (lab.overhead_pairs=N overrides)
    fails=0
    pairs=$(arg overhead_pairs)
    set -- "${pairs:-$1}"
    rounds=$(arg overhead_rounds)
    for round in $(seq "${rounds:-1}"); do
        for apic in x2apic xapic; do
            for target in halt spin; do
                for how in bpf sampled counters off; do
                    name=overhead-$apic-$target-$how
                    [ "${rounds:-1}" -gt 1 ] && name=$name-$round
                    # Counted by reason: every exit of KVM's stat sampled or lost.
                    set -- "$1"
                    case $how in bpf | sampled) set -- "$1" --expect 'vcpu*.exit_reasons.missing == vcpu*.exit_reasons.lost' ;; esac
                    watch_run 45 ipivmm run --repeat 1 --apic $apic --target $target --iterations "${ITER:-200}" \
                        --warmup 10 -q --serial none --exit-reasons $how --observer-effect "$@" \
                        --json "$OUT/runs/$name.json"
                    rc=$?
                    echo "$name: rc=$rc"
                    [ $rc = 0 ] || fails=$((fails + 1))
                done
            done
        done
    done
    echo "overhead: $fails runs failed"
    [ $fails -eq 0 ]
}

# Runs a command that starts VMs one after another (each with its own
# watchdog); when one VM's vCPU threads live longer than $1 seconds, the
# kernel stacks and states of every thread of the command go to the log
# once per stalled VM: where a hang is (KVM halt, the VMM, a drain).
watch_run() { # $1: seconds a VM may run before its stacks are taken, then the command
    limit=$1
    shift
    "$@" &
    pid=$!
    seen="" since=0 dumped=""
    while kill -0 $pid 2>/dev/null; do
        sleep 2
        vcpus=$(for t in /proc/$pid/task/*; do
            grep -q '^vcpu' "$t/comm" 2>/dev/null && echo "${t##*/}"
        done | tr '\n' ' ')
        now=$(cut -d. -f1 /proc/uptime)
        if [ -z "$vcpus" ] || [ "$vcpus" != "$seen" ]; then
            seen=$vcpus since=$now
            continue
        fi
        if [ $((now - since)) -ge "$limit" ] && [ "$dumped" != "$vcpus" ]; then
            dumped=$vcpus
            echo "=== lab: a VM of pid $pid has run ${limit}s (vCPU threads $vcpus): every thread"
            for t in /proc/$pid/task/*; do
                echo "--- tid ${t##*/} $(cat "$t/comm") state=$(cut -d' ' -f3 "$t/stat") wchan=$(cat "$t/wchan" 2>/dev/null)"
                cat "$t/stack" 2>/dev/null
            done
        fi
    done
    wait $pid
}

# An exit flood between two drains of the sampler's ring: lost records must
# be reported (complete: false), never under-counted silently.
flood_lost() {
    ipivmm run --repeat 1 --workload flood --apic x2apic --iterations "${ITER:-200000}" --warmup 10 -q --serial none --timeout 300 \
        --json "$OUT/runs/flood-lost.json"
}

# Diagnosis of the flood stall: the same flood with each way of counting.
flood_diag() {
    fails=0
    for i in 1 2; do
        for how in sampled counters off; do
            ipivmm run --repeat 1 --workload flood --apic x2apic --iterations "${ITER:-20000}" --warmup 10 -q \
                --serial none --exit-reasons $how --json "$OUT/runs/flood-diag-$how-$i.json" 2>&1 | tail -n 1
            echo "flood-diag $how #$i: rc=$?"
        done
    done
    return 0
}

reload_vendor() { # $@: module parameters
    hold_vm stop
    rmmod "$VENDOR" && insmod "/lab/modules/$VENDOR.ko" "$@"
    hold_vm start
}

# One empty VM held from module load to the end of the pass, released
# around module reloads and the host-switch step (why: scripts/lab/hold-vm.c);
# a step's script calls it as `/init __fn hold_vm stop|start` (probe-avic.sh).
hold_vm() { # start | stop
    case $1 in
    start) [ -c /dev/kvm ] && { hold-vm & echo $! >/run/hold-vm.pid; } ;;
    stop)
        [ -s /run/hold-vm.pid ] && kill "$(cat /run/hold-vm.pid)" 2>/dev/null
        rm -f /run/hold-vm.pid
        sleep 1
        ;;
    esac
    return 0
}

# The results so far onto the output disk, after every step: a guest that
# hangs later (or a host timeout) still leaves them to the host.
save() { (cd $OUT && tar -cf "$DISK" .) && sync; }

# The output disk: lab.disk=, else the first of virtio (QEMU), ATA (Bochs:
# libata probes asynchronously, so wait for it) or legacy IDE.
# Exported: steps run in a fresh /init (scripts such as /lab/extra.sh save
# partial results onto it).
find_disk() {
    export DISK
    DISK=$(arg disk)
    [ -n "$DISK" ] && return
    for _ in $(seq 30); do
        for DISK in /dev/vda /dev/sda /dev/hda; do [ -b $DISK ] && return; done
        sleep 1
    done
    DISK=/dev/vda
    say "no output disk found (vda, sda, hda)"
}

finish() {
    dmesg >$OUT/dmesg.txt
    cp /proc/cpuinfo $OUT/cpuinfo.txt
    say "writing results to $DISK"
    save
    say "done"
    poweroff -f
}

main() {
    /bin/busybox --install -s /bin
    mount -t proc proc /proc
    mount -t sysfs sys /sys
    mount -t devtmpfs dev /dev
    # /tmp stays the initramfs's own (already in RAM): a tmpfs mounted over it
    # would hide the binaries when the checkout itself lives under /tmp.
    mount -t tracefs nodev /sys/kernel/tracing
    mount -t debugfs nodev /sys/kernel/debug
    mkdir -p $OUT $OUT/tests $OUT/runs
    PASS=$(arg pass)
    PASS=${PASS:-quick}

    say "pass $PASS on $(uname -r), $(nproc) CPUs"
    # The host's watchdog: a guest whose user space stops gets no heartbeat out.
    (while sleep 20; do echo "lab: heartbeat $(cut -d' ' -f1 /proc/uptime)"; done) &
    HEARTBEAT_PID=$!
    # lab.kvm=a=1,b=2: parameters for kvm_intel/kvm_amd (e.g. enable_apicv=0).
    load_modules $(arg kvm | tr ',' ' ')
    find_disk
    export DISK # for /lab/extra.sh, to save partial results itself
    # Text symbols with their addresses (Debian's System.map is a stub): the
    # host names a wedged guest's RIPs with them (xtask/src/lab/wedge.rs).
    echo 0 >/proc/sys/kernel/kptr_restrict
    grep -E '^[0-9a-f]+ [tTwW] ' /proc/kallsyms >$OUT/kallsyms.txt
    for p in /sys/module/kvm_amd/parameters/* /sys/module/kvm_intel/parameters/*; do
        [ -e "$p" ] && echo "$(basename "$(dirname "$(dirname "$p")")").$(basename "$p")=$(cat "$p")"
    done >$OUT/module-params.txt
    if [ ! -c /dev/kvm ]; then
        say "no /dev/kvm after loading $VENDOR"
        printf 'load-kvm\t1\t0\n' >>$OUT/steps.tsv
        finish
    fi
    say "$VENDOR loaded: $(tr '\n' ' ' <$OUT/module-params.txt)"
    setup_modprobe
    mkdir -p /run
    hold_vm start

    ITER=$(arg iterations)
    DEADLINE=$(arg deadline)
    export DEADLINE=${DEADLINE:-3600}
    STEPS=$(arg steps)
    if [ -n "$STEPS" ]; then
        # lab.steps=a,b: only these steps of the pass (cargo xtask lab --steps;
        # the host checks the names against these cases).
        for s in $(echo "$STEPS" | tr ',' ' '); do
            case $s in
            host) step host 60 host_facts ;;
            sweep) step sweep 1800 check_plan sweep lab-sweep.toml "$ITER" ;;
            tests) run_tests "" ;;
            kvm-paths) step kvm-paths 1200 check_plan kvm-paths kvm-paths.toml ;;
            inhibit) step inhibit-repeats 1800 inhibit_repeats "${ITER:-3}" ;;
            hostswitch) hold_vm stop; step hostswitch 900 host_switch; hold_vm start ;;
            inhibit-loaded) step inhibit-repeats-loaded 1800 under_load inhibit_repeats "${ITER:-3}" ;;
        stress) step stress 3000 stress_tests "${ITER:-20}" ;;
            overhead) step overhead 2400 overhead 3 ;;
            flood) step flood-lost 600 flood_lost ;;
            flood-diag) step flood-diag 1200 flood_diag ;;
            # A script an extra initramfs archive brought. The VM stays
            # held: a script that reloads the vendor module releases it
            # around the reload (/init __fn hold_vm stop|start).
            extra) step extra 3000 /lab/extra.sh ;;
            *) say "unknown step $s" ;;
            esac
        done
        PASS=custom
    fi
    case $PASS in
    custom) ;;
    shell)
        say "interactive shell: ipivmm and the test binaries are in /lab; 'poweroff -f' ends"
        setsid cttyhack sh
        finish
        ;;
    quick)
        step host 60 host_facts
        step sweep 1800 check_plan sweep lab-sweep.toml "$ITER"
        step kvm-paths 1200 check_plan kvm-paths kvm-paths.toml
        run_tests ""
        step inhibit-repeats 900 inhibit_repeats 3
        hold_vm stop
        step hostswitch 900 host_switch
        reload_vendor npt=0
        step sweep-npt0 900 check_plan sweep-npt0 lab-npt0.toml "$ITER"
        ;;
    full)
        step host 60 host_facts
        # Every workload, a halted target and the presets: one plan.
        step sweep 7200 check_plan sweep lab-full.toml "$ITER"
        step kvm-paths 1200 check_plan kvm-paths kvm-paths.toml
        run_tests ""
        step inhibit-repeats 1800 inhibit_repeats 20
        step inhibit-repeats-loaded 1800 under_load inhibit_repeats 20
        step overhead 2400 overhead 3
        step flood-lost 600 flood_lost
        hold_vm stop
        step hostswitch 900 host_switch
        reload_vendor npt=0
        step sweep-npt0 1800 check_plan sweep-npt0 lab-sweep.toml "${ITER:-100}"
        run_tests "-npt0"
        ;;
    *)
        say "unknown pass '$PASS'"
        printf 'pass\t1\t0\n' >>$OUT/steps.tsv
        ;;
    esac
    finish
}

if [ "${1:-}" = __fn ]; then
    shift
    "$@"
    exit $?
fi
main
