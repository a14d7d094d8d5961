//! Live tests on this host's kernel (skipped, visibly, without tracefs or
//! without the right to sample): a syscall tracepoint drives the real ring
//! (exact counts, wrap-around, losses), and the kvm samplers open.

use std::time::Instant;

use super::super::error::SamplerError;
use super::super::event::{SampledEvents, SAMPLE_TYPE};
use super::super::exits::ExitSampler;
use super::super::inhibit::InhibitSampler;
use super::super::ring::{parse_records, Record};
use crate::tracefs::Tracefs;

fn skip(test: &str, why: impl std::fmt::Display) {
    eprintln!("SKIP {test}: {why}");
}

fn tracefs(test: &str) -> Option<Tracefs> {
    match Tracefs::find() {
        Ok(t) => Some(t),
        Err(e) => {
            skip(test, e);
            None
        }
    }
}

/// `Some(result)` unless opening failed for lack of rights or of the event.
fn opened<T>(test: &str, r: Result<T, SamplerError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e @ (SamplerError::Open { .. } | SamplerError::NoSuchEvent(_))) => {
            skip(test, e);
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

fn getpid_n(n: usize) {
    for _ in 0..n {
        // SAFETY: getpid takes no arguments and has no side effects.
        unsafe { libc::syscall(libc::SYS_getpid) };
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec the call writes.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// (samples, lost, times, ring full) of one read of a getpid ring.
fn take(ev: &mut SampledEvents, tp: u64) -> (u64, u64, Vec<u64>, bool) {
    let id = ev.events()[0].id();
    let out = ev.read();
    assert!(out.error.is_none(), "{:?}", out.error);
    let (mut n, mut lost, mut times) = (0, 0, Vec::new());
    for rec in parse_records(out.bytes, SAMPLE_TYPE) {
        match rec.expect("well-formed ring") {
            Record::Sample {
                id: i, time, raw, ..
            } => {
                assert_eq!(i, id);
                assert_eq!(u64::from(u16::from_le_bytes([raw[0], raw[1]])), tp);
                n += 1;
                times.push(time);
            }
            Record::Lost { lost: l, .. } => lost += l,
            Record::Other { kind } => panic!("unexpected record {kind}"),
        }
    }
    (n, lost, times, out.full)
}

fn getpid_ring(test: &str, pages: usize) -> Option<(SampledEvents, u64)> {
    let t = tracefs(test)?;
    let tp = match t.event_id("syscalls", "sys_enter_getpid") {
        Ok(id) => id,
        Err(e) => {
            skip(test, e);
            return None;
        }
    };
    let ev = opened(
        test,
        SampledEvents::open(&[(tp, "syscalls:sys_enter_getpid")], pages),
    )?;
    Some((ev, tp))
}

#[test]
fn real_ring_counts_exactly_wraps_and_reports_losses() {
    let test = "real_ring_counts_exactly_wraps_and_reports_losses";
    let Some((mut ev, tp)) = getpid_ring(test, 1) else {
        return;
    };
    assert_eq!(take(&mut ev, tp).0, 0, "disabled at open");
    ev.enable().unwrap();
    let t0 = monotonic_ns();
    getpid_n(10);
    let t1 = monotonic_ns();
    let (n, lost, times, full) = take(&mut ev, tp);
    assert_eq!((n, lost, full), (10, 0, false));
    // CLOCK_MONOTONIC timestamps, in order, within the userspace bracket.
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(times[0] >= t0 && times[9] <= t1, "{t0} {times:?} {t1}");
    // Many fills of a one-page ring: the stream wraps, records straddle.
    for _ in 0..300 {
        getpid_n(30);
        let (n, lost, _, full) = take(&mut ev, tp);
        assert_eq!((n, lost, full), (30, 0, false));
    }
    // Another thread's calls are not sampled here.
    std::thread::spawn(|| getpid_n(50)).join().unwrap();
    assert_eq!(take(&mut ev, tp).0, 0);
    // Overflow: the kernel drops what does not fit and says so with the
    // next record it can write. Nothing goes missing unreported.
    getpid_n(1000);
    let (a, lost_a, _, full_a) = take(&mut ev, tp);
    assert!(full_a, "a full ring is flagged at the read");
    getpid_n(1);
    let (b, lost_b, _, full_b) = take(&mut ev, tp);
    assert!(!full_b);
    assert!(a < 1000, "{a} samples fit in one page?");
    assert_eq!(a + b + lost_a + lost_b, 1001, "{a} {b} {lost_a} {lost_b}");
    assert!(lost_a + lost_b > 0);
    eprintln!("overflow of a 1-page ring: {a} + {b} samples, {lost_a} + {lost_b} lost");
    // Disabled: nothing; enabled again: counting resumes.
    ev.disable().unwrap();
    getpid_n(5);
    assert_eq!(take(&mut ev, tp).0, 0);
    ev.enable().unwrap();
    getpid_n(5);
    assert_eq!(take(&mut ev, tp).0, 5);
}

#[test]
fn exit_sampler_opens_and_drains_on_this_kernel() {
    let test = "exit_sampler_opens_and_drains_on_this_kernel";
    let Some(t) = tracefs(test) else { return };
    let Some(mut s) = opened(test, ExitSampler::open(&t, 256)) else {
        return;
    };
    assert_eq!(s.buffer_bytes(), 256 * super::super::ring::page_size());
    // No guest runs on this thread: nothing to see, nothing lost.
    let tally = s.drain();
    assert_eq!((tally.exits, tally.entries), (0, 0));
    assert!(tally.is_complete() && tally.unmatched == 0, "{tally:?}");
    let off = s.disable().unwrap();
    assert!(off.is_complete());
    s.enable().unwrap();
    assert_eq!(s.drain().exits, 0);
    // Cost of a drain with nothing pending (the common case at a marker).
    let n = 100_000;
    let start = Instant::now();
    for _ in 0..n {
        std::hint::black_box(s.drain());
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(n);
    eprintln!("ExitSampler::drain, empty ring: {ns:.0} ns per drain");
}

#[test]
fn inhibit_sampler_sees_vm_creation_on_this_thread() {
    let test = "inhibit_sampler_sees_vm_creation_on_this_thread";
    let Some(t) = tracefs(test) else { return };
    let Some(mut s) = opened(test, InhibitSampler::open(&t, 1)) else {
        return;
    };
    let Ok(kvm) = kvm_ioctls::Kvm::new() else {
        skip(test, "cannot open /dev/kvm");
        return;
    };
    let before = monotonic_ns();
    let vm = kvm.create_vm().unwrap();
    let d = s.drain();
    drop(vm);
    assert_eq!((d.lost, d.malformed), (0, 0));
    eprintln!(
        "inhibit changes at VM creation: {:?}, names {:?}",
        d.changes,
        s.names()
    );
    // KVM_CREATE_VM sets ABSENT (or DISABLED when APICv is off) on the
    // creating thread: kvm_apicv_init().
    let c = d.changes.first().expect("KVM_CREATE_VM changed no inhibit");
    assert!(c.set && c.time_ns >= before);
    let name = s.names().get(&c.reason).map(String::as_str);
    assert!(matches!(name, Some("ABSENT" | "DISABLED")), "{name:?}");
    assert_eq!(s.decode(1 << c.reason), [name.unwrap_or_default()]);
}

#[test]
fn cpu_wide_inhibit_sampler_sees_this_thread_only() {
    let test = "cpu_wide_inhibit_sampler_sees_this_thread_only";
    let Some(t) = tracefs(test) else { return };
    let me = rustix::thread::gettid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs();
    // Opened by another thread for this one, as a run does.
    let opener = std::thread::spawn(move || InhibitSampler::open_for_thread(&t, 1, me));
    let Some(mut s) = opened(test, opener.join().expect("opener thread")) else {
        return;
    };
    let Ok(kvm) = kvm_ioctls::Kvm::new() else {
        skip(test, "cannot open /dev/kvm");
        return;
    };
    // A VM created by another thread: its creation's changes are not ours.
    let other = std::thread::spawn(move || kvm.create_vm().map(drop).map(|()| kvm));
    let Ok(kvm) = other.join().expect("creating thread") else {
        skip(test, "KVM_CREATE_VM failed");
        return;
    };
    let d = s.drain();
    assert!(d.changes.is_empty(), "another thread's changes: {d:?}");
    assert!(
        d.other_threads >= 1,
        "the other thread's creation was not seen: {d:?}"
    );
    let before = monotonic_ns();
    let vm = kvm.create_vm().unwrap();
    let d = s.drain();
    drop(vm);
    assert_eq!((d.lost, d.malformed), (0, 0));
    let c = d.changes.first().expect("KVM_CREATE_VM changed no inhibit");
    assert!(c.set && c.time_ns >= before);
    let name = s.names().get(&c.reason).map(String::as_str);
    assert!(matches!(name, Some("ABSENT" | "DISABLED")), "{name:?}");
}

#[test]
fn drain_cost_with_records() {
    let test = "drain_cost_with_records";
    let Some((mut ev, tp)) = getpid_ring(test, 64) else {
        return;
    };
    ev.enable().unwrap();
    let (rounds, per) = (2_000, 100);
    let mut spent = std::time::Duration::ZERO;
    for _ in 0..rounds {
        getpid_n(per);
        let start = Instant::now();
        let (n, ..) = take(&mut ev, tp);
        spent += start.elapsed();
        assert_eq!(n, per as u64);
    }
    let per_drain = spent.as_nanos() as f64 / f64::from(rounds);
    eprintln!(
        "drain of {per} samples (copy + parse): {per_drain:.0} ns, {:.1} ns per record",
        per_drain / per as f64
    );
}

#[test]
fn exit_decode_cost() {
    use super::super::exits::{ExitDecoder, ExitPairer};
    use super::formats::{KVM_ENTRY_6_18, KVM_EXIT_6_18};
    use super::{fmt, raw, sample};
    let (xf, ef) = (fmt(KVM_EXIT_6_18), fmt(KVM_ENTRY_6_18));
    let d = ExitDecoder::new(&xf, &ef, 1, 2).unwrap();
    let (x, e) = (raw(&xf, &[("exit_reason", 32), ("isa", 1)]), raw(&ef, &[]));
    let pairs = 10_000u64;
    let mut bytes = Vec::new();
    for i in 0..pairs {
        bytes.extend(sample(1, i * 100, &x));
        bytes.extend(sample(2, i * 100 + 40, &e));
    }
    let mut p = ExitPairer::new();
    let start = Instant::now();
    let t = d.drain_bytes(&mut p, &bytes);
    let ns = start.elapsed().as_nanos() as f64 / pairs as f64;
    assert_eq!(t.by_reason[&32].timed, pairs);
    eprintln!(
        "decode + pair: {ns:.1} ns per exit ({} bytes per exit/entry pair)",
        bytes.len() as u64 / pairs
    );
}
