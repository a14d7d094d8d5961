//! The hostile SDK payload (`ipivmm_tests::HOSTILE_PAYLOAD`, one case per
//! `BootInfo::params[0]`) against what ipivmm keeps, reports and sums:
//! issue 20's guest-driven cases 1, 7, 9, 10 and 11 (6 is in
//! `user_irqchip_events.rs`, 3 in `cli/tests/stdout_pipe.rs`). Each test
//! says which case it is and what ipivmm did before the fix.
use ipivmm_abi::MAX_SAMPLES_PER_MSG;
use ipivmm_analysis::results::RunReport;
use ipivmm_analysis::results::{Document, RunStatus, VcpuEnd};
use ipivmm_cli::output::fit::Layout;
use ipivmm_cli::output::text;
use ipivmm_tests::cases::*;
use ipivmm_tests::{hostile_config, kvm_available, run_ok};

const MIB: u64 = 1 << 20;

fn json_of(r: &RunReport) -> String {
    Document::new(vec![r.clone()], Vec::new()).to_json()
}

/// Case 1: 8 Samples messages of 2^20 samples of u64::MAX. Each such sample
/// used to get a histogram bucket of its own (the top bucket's exclusive
/// bound saturates at u64::MAX), uncharged: a 1.49 GB JSON under an 80 MiB
/// budget. Now the top bucket holds u64::MAX: one bucket, a small JSON.
#[test]
fn u64_max_samples_share_one_bucket_and_the_json_stays_small() {
    let name = "u64_max_samples_share_one_bucket_and_the_json_stays_small";
    if !kvm_available(name) {
        return;
    }
    let mut c = hostile_config(
        Case::MaxSamples,
        1,
        ipivmm_testkit::scaled_secs(60),
        &[MAX_SAMPLES_MESSAGES],
    );
    c.guest_memory_budget = 80 * MIB;
    let r = run_ok(&c);
    assert_eq!(r.status, RunStatus::Completed, "{}", r.status.text());
    let p = r.vcpus[0]
        .phase_of(0, MAX_SAMPLES_PHASE)
        .expect("phase 'max' kept");
    let l = p.latency.as_ref().expect("latency of the samples");
    assert_eq!(l.count, MAX_SAMPLES_MESSAGES * MAX_SAMPLES_PER_MSG);
    assert_eq!((l.min, l.max), (u64::MAX, u64::MAX));
    assert_eq!(
        l.histogram.buckets.len(),
        1,
        "{:?}",
        l.histogram.buckets.first()
    );
    assert_eq!(l.histogram.buckets[0].count, l.count);
    let json = json_of(&r);
    assert!(
        json.len() < 64 << 10,
        "JSON of {} bytes for one phase of 8 Mi identical samples",
        json.len()
    );
    eprintln!(
        "{} samples of u64::MAX: JSON {} bytes, run {:.2} s, peak RSS {} KiB",
        l.count,
        json.len(),
        r.timings.total_ns as f64 / 1e9,
        r.timings.peak_rss_kib.unwrap_or(0)
    );
}

/// The escape sequence in every form it may take once escaped.
fn assert_escaped(what: &str, s: &str) {
    assert!(
        !s.chars().any(|c| c.is_control() && c != '\t' && c != '\n'),
        "{what} holds raw control characters: {s:?}"
    );
    assert!(
        s.contains("\\r\\u{1b}[2K\\u{1b}[1A...\\u{1b}[8m hidden"),
        "{what} lost the text: {s:?}"
    );
}

/// Case 7: a Panic or Done text of `\r\e[2K\e[1A...\e[8m` reached the
/// terminal raw (the failure line erased, the rest concealed). Now it is
/// escaped where it enters (the control port), so the status line, the
/// report and the JSON hold `\r\u{1b}[2K...`.
#[test]
fn panic_and_done_texts_reach_the_report_escaped() {
    let name = "panic_and_done_texts_reach_the_report_escaped";
    if !kvm_available(name) {
        return;
    }
    for case in [Case::PanicEscapes, Case::DoneEscapes] {
        let r = run_ok(&hostile_config(
            case,
            1,
            ipivmm_testkit::scaled_secs(20),
            &[],
        ));
        let RunStatus::Failed { reason } = &r.status else {
            panic!("{case:?}: status {:?}", r.status)
        };
        assert_escaped("the status", &r.status.text());
        assert_escaped("the reason", reason);
        let message = match &r.vcpus[0].end {
            Some(VcpuEnd::Fault { reason, .. }) => reason.clone(),
            Some(VcpuEnd::Done { status: 1, message }) => message.clone(),
            other => panic!("{case:?}: vcpu0 ended {other:?}"),
        };
        assert_escaped("the vCPU's end", &message);
        assert_escaped("the text report", &text::render(&r));
        assert_escaped("the JSON", &json_of(&r).replace("\\\\", "\\"));
    }
}

/// Case 9: phase id 0 run as 'alpha' then 'beta' on vCPU 0 and as 'gamma'
/// on vCPU 1 showed as one table 'alpha' (beta's samples were even added to
/// alpha), and the headline blended them. Now each (id, name) is a phase of
/// its own: its table, its samples, its headline; phase 1 'same' run twice
/// on vCPU 0 stays one phase (a legitimate reuse) and the report says so.
#[test]
fn a_reused_phase_id_is_a_phase_per_name() {
    let name = "a_reused_phase_id_is_a_phase_per_name";
    if !kvm_available(name) {
        return;
    }
    let r = run_ok(&hostile_config(
        Case::PhaseIdReuse,
        2,
        ipivmm_testkit::scaled_secs(30),
        &[],
    ));
    assert_eq!(r.status, RunStatus::Completed, "{}", r.status.text());
    // Every run of a phase kept its own samples and records.
    let runs = [
        (0, 0, REUSE_NAMES[0], 0),
        (0, 0, REUSE_NAMES[1], 1),
        (0, 1, REUSE_SAME, 3),
        (0, 1, REUSE_SAME, 4),
        (1, 0, REUSE_NAMES[2], 2),
    ];
    for (v, id, phase, which) in runs {
        let p = r.vcpus[v]
            .phases_of(id, phase)
            .find(|p| p.records.get("which") == Some(&which))
            .unwrap_or_else(|| panic!("vcpu{v} phase {id} '{phase}' #{which} missing"));
        let l = p.latency.as_ref().expect("samples");
        assert_eq!(
            (l.count, l.min, l.max),
            (REUSE_SAMPLES, reuse_value(which), reuse_value(which)),
            "vcpu{v} phase {id} '{phase}' #{which}"
        );
    }
    // Unwrapped (--wide): the checks read whole lines.
    let report = text::render_with(&r, Layout::Wide);
    for title in ["phase 0 'alpha'", "phase 0 'beta'", "phase 0 'gamma'"] {
        assert_eq!(report.matches(title).count(), 1, "{title}:\n{report}");
    }
    assert_eq!(report.matches("phase 1 'same'").count(), 1, "{report}");
    assert!(report.contains("vcpu0 ran this phase 2 times"), "{report}");
    // The headline is one phase's: 'same', with the most samples (2 x 16):
    // p50 the sample-weighted mean of its two runs' p50s, p99 the larger,
    // nothing of the other phases.
    let s = r.summary();
    assert_eq!(s.phase.as_deref(), Some(REUSE_SAME));
    let l = s.latency.expect("headline latency");
    assert_eq!(l.count, 2 * REUSE_SAMPLES);
    let mean = (reuse_value(3) + reuse_value(4)) as f64 / 2.0;
    assert!(l.p50 == mean && l.p99 == reuse_value(4) as f64, "{l:?}");
    assert!(
        report.contains("headline ('same'; exits and IPIs summed over all vCPUs)"),
        "{report}"
    );
    // Every phase with samples gets its own summary (the charts).
    let phases: Vec<_> = r
        .phase_summaries()
        .into_iter()
        .map(|s| (s.phase.unwrap_or_default(), s.latency.map(|l| l.count)))
        .collect();
    assert_eq!(
        phases,
        [
            ("alpha".into(), Some(REUSE_SAMPLES)),
            ("beta".into(), Some(REUSE_SAMPLES)),
            ("same".into(), Some(2 * REUSE_SAMPLES)),
            ("gamma".into(), Some(REUSE_SAMPLES)),
        ]
    );
}

/// Case 10: samples for a phase that never began (or never ended) were
/// dropped without a word. Now those of a phase that never began are
/// counted per vCPU and phase id, in the JSON (`samples_without_phase`) and
/// in the text report; a phase still open at Done (issue 30, case 4) is
/// kept with its samples, marked `unfinished`, and shown as such.
#[test]
fn samples_for_phases_that_never_ended_are_counted() {
    let name = "samples_for_phases_that_never_ended_are_counted";
    if !kvm_available(name) {
        return;
    }
    let r = run_ok(&hostile_config(
        Case::OrphanSamples,
        1,
        ipivmm_testkit::scaled_secs(20),
        &[],
    ));
    assert_eq!(r.status, RunStatus::Completed, "{}", r.status.text());
    let v = &r.vcpus[0];
    let kept = v.phase_of(0, "kept").and_then(|p| p.latency.as_ref());
    assert_eq!(kept.map(|l| l.count), Some(10));
    let want: Vec<(u32, u64)> = vec![(ORPHAN_NEVER_BEGAN, ORPHAN_SAMPLES)];
    let got: Vec<(u32, u64)> = v
        .samples_without_phase
        .iter()
        .map(|(k, n)| (*k, *n))
        .collect();
    assert_eq!(got, want);
    let open = v
        .phase_of(ORPHAN_NEVER_ENDED, "never-ends")
        .expect("the phase open at Done is kept");
    assert!(open.unfinished);
    assert_eq!(open.latency.as_ref().map(|l| l.count), Some(ORPHAN_SAMPLES));
    // Unwrapped (--wide): the checks read whole lines.
    let report = text::render_with(&r, Layout::Wide);
    let line =
        format!("vcpu0: {ORPHAN_SAMPLES} samples dropped: their phase never ended on this vCPU");
    assert!(report.contains(&line), "{report}");
    assert!(report.contains("(phase 7: 100)"), "{report}");
    assert!(report.contains("phase 8 'never-ends'"), "{report}");
    assert!(report.contains("UNFINISHED on vcpu0"), "{report}");
    // In the JSON, and read back.
    let json = json_of(&r);
    assert!(json.contains("\"samples_without_phase\""), "{json}");
    let back = Document::from_json(&json, "back").unwrap();
    assert_eq!(
        back.runs[0].vcpus[0].samples_without_phase,
        v.samples_without_phase
    );
    assert!(back.runs[0].vcpus[0]
        .phase_of(ORPHAN_NEVER_ENDED, "never-ends")
        .is_some_and(|p| p.unfinished));
}

/// Case 11: two vCPUs whose guest counters grow by 2^63 each over the
/// measured phase summed (wrapping) to 0 IPIs: "IPIs/sample 0.00". Now the
/// sums saturate: u64::MAX IPIs, a huge ratio, never 0.
#[test]
fn counters_that_overflow_a_u64_saturate_in_every_sum() {
    let name = "counters_that_overflow_a_u64_saturate_in_every_sum";
    if !kvm_available(name) {
        return;
    }
    let r = run_ok(&hostile_config(
        Case::HugeCounters,
        2,
        ipivmm_testkit::scaled_secs(20),
        &[],
    ));
    assert_eq!(r.status, RunStatus::Completed, "{}", r.status.text());
    for v in &r.vcpus {
        let p = v.phase_of(0, "measure").expect("phase kept");
        assert_eq!(p.guest.ipis_received, HUGE_COUNTER, "vcpu{}", v.index);
    }
    let s = r.summary();
    assert_eq!((s.ipis, s.ipis_delivered), (u64::MAX, u64::MAX));
    assert_eq!((s.icr_writes, s.operations), (u64::MAX, 20));
    let per_op = s.ipis_per_operation().expect("IPIs per sample");
    assert!(per_op > 1e17, "IPIs per sample {per_op}");
    // Unwrapped (--wide): the checks read whole lines.
    let report = text::render_with(&r, Layout::Wide);
    assert!(!report.contains("IPIs/sample 0.00"), "{report}");
}

/// Issue 30, case 6: an INIT vCPU 0 sends itself restarts the BSP at the
/// reset vector, where the first instruction fails to emulate (with the
/// user irqchip; kvm_pvm's in-kernel LAPIC leaves the BSP running). The
/// report said only "instruction emulation failed ... rip=0xfff0"; it now
/// names the INIT.
#[test]
fn an_init_to_vcpu0_is_reported_as_an_init() {
    let name = "an_init_to_vcpu0_is_reported_as_an_init";
    if !kvm_available(name) {
        return;
    }
    let mut config = hostile_config(Case::InitSelf, 2, 30, &[]);
    config.irqchip = ipivmm_analysis::mode::Irqchip::User;
    let r = run_ok(&config);
    let RunStatus::Failed { reason } = &r.status else {
        panic!("status {:?}", r.status)
    };
    let end = match &r.vcpus[0].end {
        Some(VcpuEnd::Fault { reason, .. }) => reason.clone(),
        other => panic!("vcpu0 ended {other:?}"),
    };
    assert!(end.contains("vcpu0 received an INIT"), "{end}");
    assert!(reason.contains("INIT"), "{reason}");
}
