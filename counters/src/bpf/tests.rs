//! Live tests on this host's kernel (visible skips without root, tracefs
//! or BPF). kvm_exit never fires on every KVM (kvm_pvm), so the same
//! programs are also attached to a syscall's tracepoints, which fire
//! anywhere: the exit program reads `__syscall_nr` where it reads
//! `exit_reason`, the entry program runs at every syscall exit.

use std::sync::Arc;

use super::{Attach, BpfError, BpfExits, ExitProgram};
use crate::tracefs::Tracefs;
use ipivmm_testkit::{skip, Need};

/// getppid(2) on x86_64 (never cached by libc).
const NR_GETPPID: u32 = libc::SYS_getppid as u32;

fn getppid_n(n: usize) {
    for _ in 0..n {
        // SAFETY: getppid takes no arguments and has no side effects.
        unsafe { libc::syscall(libc::SYS_getppid) };
    }
}

/// Makes `n` calls and asserts that this thread's element counted exactly
/// `n` exits in the meantime.
fn counts_exactly(me: &mut super::BpfThread, n: usize, why: &str) {
    let s = me.snapshot();
    getppid_n(n);
    assert_eq!(me.snapshot().since(&s).exits, n as u64, "{why}");
}

fn syscall_attach() -> Attach {
    Attach {
        exit: ("syscalls".into(), "sys_enter_getppid".into()),
        reason: vec!["__syscall_nr".into()],
        isa: vec![],
        entry: "sys_exit".into(),
        events: false,
        exit_program: ExitProgram::Record {
            why_not_raw: "the record program is under test".into(),
        },
    }
}

/// The counter, or None after a visible skip (no rights, no tracefs, no
/// such event, no clang at build time).
fn loaded(test: &str, at: &Attach, capacity: usize) -> Option<Arc<BpfExits>> {
    let tracefs = match Tracefs::find() {
        Ok(t) => t,
        Err(e) => {
            skip(test, Need::Setup, &format!("{e}"));
            return None;
        }
    };
    if !tracefs.has_event(&at.exit.0, &at.exit.1) {
        skip(
            test,
            Need::Setup,
            &format!("no event {}:{} here", at.exit.0, at.exit.1),
        );
        return None;
    }
    match BpfExits::load(&tracefs, at, capacity, None).and_then(|b| b.attach_counting().map(|()| b))
    {
        Ok(b) => Some(Arc::new(b)),
        Err(e @ BpfError::NotBuilt(_)) => {
            skip(test, Need::Setup, &e.to_string());
            None
        }
        Err(e) if !rustix::process::geteuid().is_root() => {
            skip(test, Need::Setup, &format!("not root: {e}"));
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

#[test]
fn the_program_counts_and_times_a_threads_events_exactly_while_switched_on() {
    let test = "bpf::the_program_counts_and_times_a_threads_events_exactly_while_switched_on";
    let Some(bpf) = loaded(test, &syscall_attach(), 2) else {
        return;
    };
    let mut me = bpf.register().unwrap();
    assert!(!me.counting(), "a thread starts switched off");
    let s0 = me.snapshot();
    getppid_n(100);
    let s1 = me.snapshot();
    assert_eq!(s1.since(&s0).exits, 0, "switched off: nothing counted");

    me.set_counting(true).unwrap();
    let s1 = me.snapshot();
    getppid_n(1000);
    // An unregistered thread's calls are not this thread's.
    std::thread::spawn(|| getppid_n(300)).join().unwrap();
    let s2 = me.snapshot();
    let t = s2.since(&s1);
    let r = t.by_reason.get(&NR_GETPPID).copied().unwrap_or_default();
    assert_eq!((t.exits, r.count, r.timed), (1000, 1000, 1000), "{t:?}");
    assert!(
        r.host_ns > 0 && r.host_ns / 1000 < 1_000_000,
        "mean host ns {}",
        r.host_ns / 1000
    );
    assert_eq!(
        (t.lost, t.malformed, t.unmatched, t.pending),
        (0, 0, 0, None)
    );

    // A second registered thread counts into its own element only.
    let other = bpf.clone();
    let theirs = std::thread::spawn(move || {
        let mut t = other.register().unwrap();
        t.set_counting(true).unwrap();
        let a = t.snapshot();
        getppid_n(50);
        t.snapshot().since(&a).exits
    })
    .join()
    .unwrap();
    assert_eq!(theirs, 50);
    assert_eq!(me.snapshot().since(&s2).exits, 0);

    me.set_counting(false).unwrap();
    getppid_n(100);
    assert_eq!(me.snapshot().since(&s2).exits, 0, "switched off again");
    assert!(matches!(bpf.register(), Err(BpfError::Full(2))));
}

#[test]
fn the_programs_run_exactly_while_some_thread_counts() {
    let test = "bpf::the_programs_run_exactly_while_some_thread_counts";
    let Some(bpf) = loaded(test, &syscall_attach(), 2) else {
        return;
    };
    if let Err(why) = bpf.detaches_when_idle() {
        panic!("{test}: no anchor event, the programs cannot detach: {why}");
    }
    // The kernel's own count of the programs' runs (enabled while the fd lives).
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("BPF_ENABLE_STATS");
    let runs = || bpf.run_counts().0.expect("on_exit's run count");
    let mut me = bpf.register().unwrap();
    assert!(bpf.attached(), "attached from the load on");
    me.set_counting(true).unwrap();
    let s = me.snapshot();
    let r0 = runs();
    getppid_n(500);
    let r1 = runs();
    assert!(
        r1 >= r0 + 500,
        "attached: it ran for each call: {r0} -> {r1}"
    );
    assert_eq!(me.snapshot().since(&s).exits, 500, "and counted each");

    // Another thread switching off does not detach it while this one counts.
    let other = bpf.clone();
    let attached_after_theirs = std::thread::spawn(move || {
        let mut t = other.register().unwrap();
        t.set_counting(true).unwrap();
        t.set_counting(false).unwrap();
        drop(t);
        other.attached()
    })
    .join()
    .unwrap();
    assert!(attached_after_theirs, "one thread still counts");
    counts_exactly(&mut me, 200, "still counting");

    // The last thread switching off detaches the exit program; switching on again
    // attaches them again, and the counts go on from where they were.
    me.set_counting(false).unwrap();
    assert!(!bpf.attached());
    // The links close on a thread of their own; the programs are off their
    // tracepoints once the closing has begun: wait for it, bounded.
    let settle = std::time::Instant::now();
    let mut r2 = runs();
    loop {
        getppid_n(100);
        let r = runs();
        if r == r2 || settle.elapsed() > std::time::Duration::from_secs(5) {
            break;
        }
        r2 = r;
    }
    getppid_n(500);
    assert_eq!(runs(), r2, "detached: the kernel no longer runs it");
    me.set_counting(true).unwrap();
    assert!(bpf.attached());
    counts_exactly(&mut me, 300, "counting after re-attaching");
    drop(me);
    assert!(!bpf.attached(), "a dropped thread switches off");
}

#[test]
fn a_thread_whose_cache_slot_is_taken_is_counted_through_the_hash() {
    let test = "bpf::a_thread_whose_cache_slot_is_taken_is_counted_through_the_hash";
    let Some(bpf) = loaded(test, &syscall_attach(), 1) else {
        return;
    };
    let tid = rustix::thread::gettid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs();
    // Another thread with the same low bits holds this thread's slot.
    let slot = bpf.tid_slot(tid);
    let stranger = tid ^ super::layout::TID_SLOTS as u32;
    // SAFETY: the test's own map; no thread is registered yet.
    unsafe { std::ptr::addr_of_mut!((*slot).tid).write_volatile(stranger) };
    let mut me = bpf.register().unwrap();
    // SAFETY: as above; register only reads a taken slot.
    let held = unsafe { std::ptr::addr_of!((*slot).tid).read_volatile() };
    assert_eq!(held, stranger, "register leaves a taken slot alone");
    me.set_counting(true).unwrap();
    counts_exactly(&mut me, 700, "counted through THREADS");
    drop(me);
    // SAFETY: as above.
    let left = unsafe { std::ptr::addr_of!((*slot).tid).read_volatile() };
    assert_eq!(left, stranger, "a thread clears only its own slot");
}

#[test]
fn the_kvm_program_loads_and_attaches() {
    let test = "bpf::the_kvm_program_loads_and_attaches";
    let Some(bpf) = loaded(test, &Attach::kvm(), 4) else {
        return;
    };
    let mut t = bpf.register().unwrap();
    t.set_counting(true).unwrap();
    let a = t.snapshot();
    // No vCPU runs on this thread: nothing to count, but counting is live.
    assert_eq!(t.snapshot().since(&a).exits, 0);
    assert_eq!(bpf.capacity(), 4);
    // The event counters attach where the kvm events are as the programs read them.
    assert!(bpf.unavailable().is_empty(), "{:?}", bpf.unavailable());
    assert_eq!(
        bpf.counters().len(),
        super::layout::EVENT_COUNTERS.len() + 1
    );
    let v = t.snapshot().counter_values(bpf.counters());
    assert_eq!(v.len(), bpf.counters().len());
    assert_eq!(v[crate::specs::names::APIC_ICR_WRITE], 0);
    // Inhibit changes are logged from the load on: a VM created now with no
    // in-kernel LAPIC (or without APICv on the host) sets one at creation.
    assert_eq!(bpf.logs_inhibits(), Ok(()));
    let before = bpf.inhibit_changes().unwrap().0.len();
    let kvm = match kvm_ioctls::Kvm::new() {
        Ok(k) => k,
        Err(e) => {
            skip(test, Need::Kvm, &format!("no /dev/kvm: {e}"));
            return;
        }
    };
    let vm = kvm.create_vm().unwrap();
    let (changes, lost, names) = bpf.inhibit_changes().unwrap();
    assert_eq!(lost, 0);
    assert!(
        changes.len() > before,
        "creation logged a change: {changes:?} (names {names:?})"
    );
    drop(vm);
}

#[test]
fn the_raw_exit_program_reads_the_reason_through_the_first_argument() {
    let test = "bpf::the_raw_exit_program_reads_the_reason_through_the_first_argument";
    // raw sys_enter(struct pt_regs *regs, long id): the syscall number is
    // at regs->orig_ax, found in the kernel's BTF as a vendor's exit
    // reason is found in its module's (one hop, like vcpu_vmx).
    let orig_ax = match super::reason_at::kernel_offset(
        std::path::Path::new("/sys/kernel/btf"),
        "pt_regs",
        "orig_ax",
    ) {
        Ok(o) => o,
        Err(e) => {
            skip(test, Need::Setup, &format!("no kernel BTF: {e}"));
            return;
        }
    };
    let at = Attach {
        exit_program: ExitProgram::Raw(super::RawExit {
            event: "sys_enter".into(),
            at: super::ReasonAt::Vmx {
                exit_reason: orig_ax,
            },
            what: "pt_regs' orig_ax",
        }),
        ..syscall_attach()
    };
    let Some(bpf) = loaded(test, &at, 2) else {
        return;
    };
    assert!(bpf.raw_exit().is_ok());
    assert!(bpf.detaches_when_idle().is_err(), "nothing to detach");
    assert!(
        bpf.exit_detail().contains("pt_regs' orig_ax"),
        "{}",
        bpf.exit_detail()
    );
    let mut me = bpf.register().unwrap();
    let s0 = me.snapshot();
    getppid_n(100);
    assert_eq!(me.snapshot().since(&s0).exits, 0, "switched off");
    me.set_counting(true).unwrap();
    let s1 = me.snapshot();
    getppid_n(1000);
    std::thread::spawn(|| getppid_n(300)).join().unwrap();
    let t = me.snapshot().since(&s1);
    // Every syscall of this thread enters the raw tracepoint; getppid's are
    // counted under its number and timed to their sys_exit.
    let r = t.by_reason.get(&NR_GETPPID).copied().unwrap_or_default();
    assert_eq!((r.count, r.timed), (1000, 1000), "{t:?}");
    assert_eq!(t.malformed, 0);
    me.set_counting(false).unwrap();
    let s2 = me.snapshot();
    getppid_n(100);
    assert_eq!(me.snapshot().since(&s2).exits, 0, "switched off again");
}

#[test]
fn the_raw_kvm_exit_program_loads_and_attaches() {
    let test = "bpf::the_raw_kvm_exit_program_loads_and_attaches";
    // This host's KVM may keep no vcpu_vmx/vcpu_svm (kvm_pvm): the raw
    // program is loaded and attached with a stand-in offset; kvm_amd's real
    // one is checked in the lab (exits by reason against KVM's stats and
    // the guest's hypercalls).
    let at = Attach {
        exit_program: ExitProgram::Raw(super::RawExit {
            event: "kvm_exit".into(),
            at: super::ReasonAt::Svm {
                vmcb: 0,
                exit_code: 0x70,
            },
            what: "a stand-in",
        }),
        ..Attach::kvm()
    };
    let Some(bpf) = loaded(test, &at, 2) else {
        return;
    };
    assert!(bpf.raw_exit().is_ok());
    assert!(
        !bpf.attached(),
        "no perf link: the raw link lives with the object"
    );
    let mut t = bpf.register().unwrap();
    t.set_counting(true).unwrap();
    t.set_counting(false).unwrap();
    assert!(
        bpf.exit_detail().starts_with("raw kvm_exit"),
        "{}",
        bpf.exit_detail()
    );
}

#[test]
fn with_no_exit_program_nothing_is_attached_to_the_exit_event() {
    let test = "bpf::with_no_exit_program_nothing_is_attached_to_the_exit_event";
    let at = Attach {
        exit_program: ExitProgram::None("it never fires here".into()),
        ..syscall_attach()
    };
    let Some(bpf) = loaded(test, &at, 1) else {
        return;
    };
    let mut me = bpf.register().unwrap();
    me.set_counting(true).unwrap();
    assert!(!bpf.attached(), "switching on attaches nothing");
    counts_exactly(&mut me, 0, "nothing to count with");
    let s = me.snapshot();
    getppid_n(100);
    assert_eq!(me.snapshot().since(&s).exits, 0, "no exit program ran");
    assert!(
        bpf.exit_detail()
            .contains("no program attached (it never fires here)"),
        "{}",
        bpf.exit_detail()
    );
}

#[test]
fn loaded_idle_nothing_runs_until_the_counting_programs_attach() {
    let test = "bpf::loaded_idle_nothing_runs_until_the_counting_programs_attach";
    let (Ok(tracefs), at) = (Tracefs::find(), syscall_attach()) else {
        return skip(test, Need::Setup, "no tracefs");
    };
    if !rustix::process::geteuid().is_root() {
        return skip(test, Need::Setup, "not root");
    }
    let bpf = Arc::new(BpfExits::load(&tracefs, &at, 2, None).expect("loads"));
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("BPF_ENABLE_STATS");
    // Loaded, nothing that counts attached: neither program runs, no anchor.
    assert!(!bpf.attached() && bpf.counters().is_empty());
    assert!(bpf.detaches_when_idle().is_err());
    getppid_n(100);
    let runs = |b: &BpfExits| {
        let (exit, entry) = b.run_counts();
        (exit.unwrap_or(0), entry.unwrap_or(0))
    };
    assert_eq!(runs(&bpf), (0, 0), "nothing ran before attach_counting");
    // A thread switching on attaches them (once) and is counted.
    let mut me = bpf.register().unwrap();
    me.set_counting(true).unwrap();
    assert!(bpf.attached() && bpf.detaches_when_idle().is_ok());
    counts_exactly(&mut me, 100, "counted once attached");
    bpf.attach_counting()
        .expect("a second call gives the first answer");
    counts_exactly(&mut me, 10, "attached once, counted once");
}
