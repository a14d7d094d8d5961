//! Guests that flood the host with data (`ipivmm_tests::floods`): phases
//! without end, records without end, samples from several vCPUs, serial
//! output. Each run must stop on the run's guest memory budget
//! (`VmConfig::guest_memory_budget`) with status `over_budget` naming the
//! vCPU and the kind of data, keep what was measured, write its JSON, and
//! keep the process's peak memory near the budget.
//!
//! Each flood runs in a child process (this test binary again, told what to
//! run by `IPIVMM_FLOOD_CHILD`), so its peak RSS (VmHWM) is its own and not
//! that of the tests running beside it.
use ipivmm::config::VmConfig;
use ipivmm::run::{run, RunOptions};
use ipivmm::SerialSink;
use ipivmm_analysis::results::{Document, RunStatus, VcpuEnd};
use ipivmm_cli::output::dest::Outputs;
use ipivmm_tests::{code_payload, floods, kvm_available};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "IPIVMM_FLOOD_CHILD";
const MIB: u64 = 1 << 20;

/// One flood to run in a child.
struct Flood {
    /// The test function's name (the child runs it with `--exact`).
    test: &'static str,
    code: &'static [u8],
    vcpus: usize,
    budget: u64,
    /// Address-space limit above the child's size at start, MiB.
    as_headroom_mib: Option<u64>,
}

/// What the child measured.
struct Outcome {
    doc: Document,
    hwm_kib: u64,
    text: String,
    render: Duration,
}

fn vm_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

fn json_path(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ipivmm-flood-{test}-{}.json", std::process::id()))
}

/// In the child: run the flood, write the JSON as `ipivmm run` does (then
/// the text report), print VmHWM.
fn child(f: &Flood, json: &Path) {
    if let Some(headroom) = f.as_headroom_mib {
        let limit = vm_kib("VmSize:") * 1024 + headroom * MIB;
        rustix::process::setrlimit(
            rustix::process::Resource::As,
            rustix::process::Rlimit {
                current: Some(limit),
                maximum: None,
            },
        )
        .expect("setrlimit(RLIMIT_AS)");
    }
    let config = VmConfig {
        vcpus: f.vcpus,
        payload: code_payload(f.code),
        timeout: ipivmm_testkit::scaled(Duration::from_secs(60)),
        tracepoints: false,
        guest_memory_budget: f.budget,
        ..Default::default()
    };
    let opts = RunOptions {
        serial: SerialSink::Capture,
        ..Default::default()
    };
    let report = run(&config, opts).expect("the run starts");
    let doc = Document::new(vec![report], Vec::new());
    let outputs = Outputs::plan(Some(json), None, None, &[]).expect("a writable --json");
    let errors = outputs.write(&doc);
    assert!(errors.is_empty(), "{errors:?}");
    let started = Instant::now();
    // Unwrapped (--wide): the checks below read whole lines.
    let text =
        ipivmm_cli::output::text::render_with(&doc.runs[0], ipivmm_cli::output::fit::Layout::Wide);
    let render = started.elapsed();
    std::fs::write(json.with_extension("txt"), &text).expect("text report");
    println!(
        "FLOOD_RESULT hwm_kib={} render_us={}",
        vm_kib("VmHWM:"),
        render.as_micros()
    );
}

/// Run `f` in a child (or, in the child, run it); None when KVM is missing
/// or this is the child.
fn flood(f: &Flood) -> Option<Outcome> {
    if let Some(json) = std::env::var_os(CHILD_ENV) {
        child(f, Path::new(&json));
        return None;
    }
    let json = json_path(f.test);
    if !kvm_available(f.test) {
        return None;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = Command::new(exe)
        .args([f.test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &json)
        .output()
        .expect("child test process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let line = stdout
        .lines()
        .find_map(|l| Some(l.split_once("FLOOD_RESULT ")?.1))
        .unwrap_or_else(|| panic!("no result from the child:\n{stdout}\n{stderr}"));
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {line}"))
    };
    eprintln!("{}: child peak RSS {line}", f.test);
    let doc = Document::load(&json).expect("the child wrote its JSON");
    let text = std::fs::read_to_string(json.with_extension("txt")).expect("text report");
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(json.with_extension("txt"));
    Some(Outcome {
        doc,
        hwm_kib: field("hwm_kib"),
        text,
        render: Duration::from_micros(field("render_us")),
    })
}

/// Status over_budget for `data`, the named vCPU ended with the reason and
/// the others stopped; returns the vCPU.
fn assert_over_budget(o: &Outcome, data: &str, vcpus: usize, limit: u64) -> usize {
    let r = &o.doc.runs[0];
    let vcpu = match &r.status {
        RunStatus::OverBudget {
            vcpu,
            data: d,
            limit_bytes,
            reason,
        } => {
            assert_eq!((d.as_str(), *limit_bytes), (data, limit), "{reason}");
            assert!(
                reason.starts_with(&format!(
                    "vcpu{vcpu}: the guest's {data} exceeded the guest memory budget"
                )),
                "{reason}"
            );
            *vcpu
        }
        s => panic!("status {s:?}, expected over_budget for {data}"),
    };
    assert!(vcpu < vcpus && !r.succeeded());
    for v in &r.vcpus {
        match &v.end {
            Some(VcpuEnd::Fault { reason, .. }) if v.index == vcpu => {
                assert!(reason.contains("guest memory budget"), "{reason}")
            }
            Some(VcpuEnd::Stopped { .. }) if v.index != vcpu => {}
            other => panic!("vcpu{} ended {other:?}", v.index),
        }
    }
    vcpu
}

/// Peak RSS within the budget plus what any run takes (the test binary,
/// guest pages, threads): 96 MiB.
fn assert_bounded(o: &Outcome, budget: u64) {
    let bound_kib = (budget + 96 * MIB) / 1024;
    assert!(
        o.hwm_kib < bound_kib,
        "peak RSS {} KiB over {bound_kib} KiB",
        o.hwm_kib
    );
}

#[test]
fn phases_without_end_stop_at_the_budget_with_the_json_written_and_the_text_bounded() {
    let f = Flood {
        test: "phases_without_end_stop_at_the_budget_with_the_json_written_and_the_text_bounded",
        code: floods::PHASE_FLOOD,
        vcpus: 2,
        budget: 4 * MIB,
        as_headroom_mib: None,
    };
    let Some(o) = flood(&f) else { return };
    assert_over_budget(&o, "phases", 2, f.budget);
    let kept: usize = o.doc.runs[0].vcpus.iter().map(|v| v.phases.len()).sum();
    assert!(kept > 100, "{kept} phases kept in the JSON");
    // Phase ids count up on each vCPU: every phase that ended is there.
    for v in &o.doc.runs[0].vcpus {
        assert!(v.phases.iter().enumerate().all(|(i, p)| p.id == i as u32));
    }
    assert_bounded(&o, f.budget);
    // The text report shows 32 phases and says how many more there are.
    let distinct = o.doc.runs[0]
        .vcpus
        .iter()
        .map(|v| v.phases.len())
        .max()
        .unwrap_or(0);
    let more = format!("... {} more phases (see the JSON)", distinct - 32);
    assert!(o.text.contains(&more), "no '{more}' in the report");
    assert_eq!(o.text.matches("\nphase ").count(), 32);
    assert!(
        o.render < ipivmm_testkit::scaled(Duration::from_secs(2)),
        "text took {:?}",
        o.render
    );
    assert!(o.text.contains("status: over budget: vcpu"), "status line");
}

#[test]
fn records_without_end_stop_at_the_budget_with_the_json_written() {
    let f = Flood {
        test: "records_without_end_stop_at_the_budget_with_the_json_written",
        code: floods::RECORD_FLOOD,
        vcpus: 2,
        budget: 2 * MIB,
        as_headroom_mib: None,
    };
    let Some(o) = flood(&f) else { return };
    let vcpu = assert_over_budget(&o, "records", 2, f.budget);
    let phase = &o.doc.runs[0].vcpus[vcpu].phases[0];
    assert_eq!(phase.name, "flood");
    assert!(
        phase.records.len() > 1000,
        "{} records",
        phase.records.len()
    );
    assert!(phase.records.contains_key("0000000000000001"));
    assert_bounded(&o, f.budget);
    assert!(
        o.text.contains("more records (see the JSON)"),
        "records line bounded"
    );
}

#[test]
fn a_sample_flood_across_four_vcpus_stops_at_one_budget_for_all() {
    let f = Flood {
        test: "a_sample_flood_across_four_vcpus_stops_at_one_budget_for_all",
        code: floods::SAMPLE_FLOOD,
        vcpus: 4,
        budget: 64 * MIB,
        as_headroom_mib: None,
    };
    let Some(o) = flood(&f) else { return };
    assert_over_budget(&o, "samples", 4, f.budget);
    let r = &o.doc.runs[0];
    let counted: u64 = r
        .vcpus
        .iter()
        .filter_map(|v| v.phase(0)?.latency.as_ref().map(|l| l.count))
        .sum();
    // Every sample the budget took is in the latency figures: 8 MiB
    // messages, at most the budget in all.
    assert!(counted >= 1 << 20, "{counted} samples");
    assert!(
        counted * 8 <= f.budget,
        "{counted} samples within the budget"
    );
    assert_bounded(&o, f.budget);
}

#[test]
fn a_serial_flood_stops_at_the_budget_when_captured() {
    let f = Flood {
        test: "a_serial_flood_stops_at_the_budget_when_captured",
        code: floods::SERIAL_FLOOD,
        vcpus: 2,
        // One exit per byte: 64 KiB (4 times the tail kept) is 65,536 exits,
        // about 20 s under the lab's nested emulation (docs/lab.md).
        budget: 64 << 10,
        as_headroom_mib: None,
    };
    let Some(o) = flood(&f) else { return };
    assert_over_budget(&o, "serial", 2, f.budget);
    let r = &o.doc.runs[0];
    assert!(r.serial_tail.len() >= 16 * 1024 && r.serial_tail.bytes().all(|b| b == b'x'));
    assert_bounded(&o, f.budget);
}

#[test]
fn an_allocation_failure_under_an_address_space_limit_stops_the_run_and_keeps_the_json() {
    let f = Flood {
        test: "an_allocation_failure_under_an_address_space_limit_stops_the_run_and_keeps_the_json",
        code: floods::SAMPLE_FLOOD,
        vcpus: 1,
        budget: 1 << 40,
        as_headroom_mib: Some(768),
    };
    let Some(o) = flood(&f) else { return };
    let r = &o.doc.runs[0];
    match &r.status {
        RunStatus::OverBudget {
            vcpu, data, reason, ..
        } => {
            assert_eq!((*vcpu, data.as_str()), (0, "samples"));
            assert!(reason.contains("could not allocate"), "{reason}");
        }
        s => panic!("status {s:?}"),
    }
    assert!(r.vcpus[0]
        .phase(0)
        .and_then(|p| p.latency.as_ref())
        .is_some());
}

/// Issue 39: one budget for several runs (`RunOptions::budget`): what a
/// finished run's report holds counts against the next run, which starts
/// with it used and says so; each run keeps its own excess.
#[test]
fn a_shared_budget_holds_across_runs() {
    if !kvm_available("a_shared_budget_holds_across_runs") {
        return;
    }
    let shared = std::sync::Arc::new(ipivmm::SharedBudget::new(4 * MIB));
    let config = VmConfig {
        vcpus: 2,
        payload: code_payload(floods::PHASE_FLOOD),
        timeout: ipivmm_testkit::scaled(Duration::from_secs(60)),
        tracepoints: false,
        guest_memory_budget: 1 << 40, // the shared budget's limit holds instead
        ..Default::default()
    };
    let opts = || RunOptions {
        serial: SerialSink::Discard,
        budget: Some(shared.clone()),
        ..Default::default()
    };
    let first = run(&config, opts()).expect("the run starts");
    assert_eq!(first.status.name(), "over_budget", "{:?}", first.status);
    let held = shared.held();
    // What the report holds, counted by its own estimate (the budget's
    // charges are independent of it): kept, within what the run was allowed.
    assert_eq!(held, ipivmm::run::report_bytes(&first));
    assert!(held > 3 * MIB && held <= 4 * MIB, "{held}");
    let second = run(&config, opts()).expect("the run starts");
    match &second.status {
        RunStatus::OverBudget {
            reason,
            limit_bytes,
            ..
        } => {
            assert_eq!(*limit_bytes, 4 * MIB);
            assert!(reason.contains("MiB of it by earlier runs"), "{reason}");
        }
        s => panic!("status {s:?}"),
    }
    let phases = |r: &ipivmm_analysis::results::RunReport| {
        r.vcpus.iter().map(|v| v.phases.len()).sum::<usize>()
    };
    assert!(
        phases(&second) * 10 < phases(&first),
        "the second run had only what the first left: {} phases against {}",
        phases(&second),
        phases(&first)
    );
}
