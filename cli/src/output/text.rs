//! The human-readable report of a run: one table per phase, one row per vCPU,
//! then the latency distribution of every phase that recorded samples.
use crate::output::fit::{self, Col, FitTable, Layout};
use ipivmm_analysis::results::source::Source;
use ipivmm_analysis::results::{PhaseResult, VcpuEnd};
use ipivmm_analysis::results::{RunConfig, RunReport, RunStatus};
use std::fmt::Write;

/// KVM binary stats that say what KVM did for a vCPU beyond the exits its
/// per-kind stats count, where `kvm_exit` does not fire to name each exit's
/// reason (kvm_pvm), each with what it counts.
const KVM_STAT_MEANINGS: &[(&str, &str)] = &[
    (
        "insn_emulation",
        "instructions KVM's instruction emulator ran for the vCPU (on hardware KVM chiefly MMIO accesses, an \
         xAPIC register write without APICv one); not exits",
    ),
    (
        "insn_emulation_fail",
        "instructions that emulator declined; one the guest could not get past (a #UD, an internal-error exit) \
         would have ended the run",
    ),
    ("hypercalls", "hypercalls KVM handled"),
    ("pf_taken", "page faults KVM handled"),
    ("irq_injections", "interrupts KVM injected"),
    ("halt_wakeup", "times a halted vCPU was woken"),
];

/// What `insn_emulation` counts on kvm_pvm, measured with the
/// `kvm_emulate_insn` tracepoint over a 20-round-trip ping-pong: the
/// guest's ordinary instructions (its spin loops' PAUSE, INC, TEST, CMP,
/// Jcc, MOV), 19,089 in a phase of 21 exits.
const PVM_EMULATION: &str =
    "on kvm_pvm also the guest's ordinary instructions (its spin loops' PAUSE, \
     CMP, Jcc, MOV), thousands per exit, by the kvm_emulate_insn tracepoint";

/// What `insn_emulation_fail` counts on kvm_pvm, by the same tracepoint
/// (`failed == 1`): LFENCE (4 per timed round trip, around the guest's two
/// RDTSC) and IRETQ (the end of its IPI handler, 1 per IPI received). The
/// run goes on and its figures hold: not an error.
const PVM_EMULATION_FAIL: &str = "on kvm_pvm these are LFENCE (around the guest's RDTSC: 4 per timed round \
     trip) and IRETQ (the end of its IPI handler: 1 per IPI), by the kvm_emulate_insn tracepoint: the run goes on, \
     not an error";

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

/// The whole report as text, fitted to [`fit::WIDTH`] columns.
pub fn render(r: &RunReport) -> String {
    render_with(r, Layout::Fit)
}

/// The whole report as text, laid out by `layout` (`--wide`: every column
/// and every vCPU's row, no line wrapped).
pub fn render_with(r: &RunReport, layout: Layout) -> String {
    let text = report(r, layout);
    match layout {
        Layout::Fit => fit::wrap(&text),
        Layout::Wide => text,
    }
}

fn report(r: &RunReport, layout: Layout) -> String {
    let mut out = String::new();
    let m = &r.mode;
    let _ = writeln!(out, "{}", header_line(m, &r.label()));
    let _ = writeln!(out, "APICv: {} ({})", r.apicv.effective, r.apicv.detail);
    if let Some(line) = observed_line(r) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "exit counting: {}", r.exit_counting());
    let status = RunStatus::text(&r.status);
    let first = r.timings.first_message_ns.map_or("none".into(), ms);
    let _ = writeln!(
        out,
        "status: {status}; total {}, VM ready {}, first guest message {first}; TSC {} kHz",
        ms(r.timings.total_ns),
        ms(r.timings.setup_ns),
        r.tsc_khz
    );
    let (shown, more) = phase_ids_bounded(r, MAX_TEXT_PHASES);
    for (id, name) in &shown {
        let key = (*id, name.as_str());
        let _ = writeln!(out, "\nphase {id} '{name}'{}", part_note(r, key));
        for line in unfinished(r, key) {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "{}", phase_table(r, key, layout));
        for line in repeats(r, key) {
            let _ = writeln!(out, "{line}");
        }
        for line in exit_reasons(r, key) {
            let _ = writeln!(out, "{line}");
        }
        for line in records(r, key) {
            let _ = writeln!(out, "{line}");
        }
        if let Some(line) = halted_line(r, key) {
            let _ = writeln!(out, "{line}");
        }
        if let Some(line) = halt_polling_line(r, key) {
            let _ = writeln!(out, "{line}");
        }
        if let Some(line) = phase_apicv_line(r, key) {
            let _ = writeln!(out, "{line}");
        }
    }
    if more > 0 {
        let _ = writeln!(out, "\n... {more} more phases (see the JSON)");
    }
    if let Some(o) = &r.observer_effect {
        let _ = writeln!(out, "\n{}", o.text());
    }
    let lat = latency_table(r, layout);
    if let Some((t, more)) = lat {
        let per = match &m.payload {
            Some(_) => "latency per sample (as the payload measured it), cycles and ns".to_string(),
            None => format!(
                "latency per {} (what one sample times), cycles and ns",
                m.workload.operation()
            ),
        };
        let _ = writeln!(out, "\n{per}");
        let _ = writeln!(out, "{t}");
        if more > 0 {
            let _ = writeln!(out, "... {more} more rows (see the JSON)");
        }
    }
    if let Some(line) = metrics_line(r) {
        let _ = writeln!(out, "\n{line}");
    }
    for line in samples_without_phase(r) {
        let _ = writeln!(out, "{line}");
    }
    if r.serial_dropped_bytes > 0 {
        let _ = writeln!(
            out,
            "guest serial output: {} bytes dropped: stdout did not take them (a slow or stuck reader)",
            r.serial_dropped_bytes
        );
    }
    for v in &r.vcpus {
        if let Some(VcpuEnd::Fault { reason, registers }) = &v.end {
            let _ = writeln!(out, "vcpu{}: {reason}", v.index);
            if let Some(regs) = registers {
                let _ = writeln!(out, "  {regs}");
            }
        }
        for s in v.sources.iter().filter(|s| !s.available) {
            if v.index == 0 {
                let detail = s.detail.as_deref().unwrap_or("unavailable");
                let _ = writeln!(
                    out,
                    "counter source {}: unavailable: {} (-v or the JSON: the detail)",
                    s.source,
                    first_clause(detail)
                );
            }
        }
    }
    out
}

/// Most characters of a reason shown in one line ([`first_clause`]).
const MAX_REASON: usize = 60;

/// The first clause of a (possibly long, nested) reason: its subject (up
/// to the first `: `) and what follows up to the first parenthesis or
/// semicolon, at most [`MAX_REASON`] characters (cut at a word), `...`
/// where something was left out. The whole reason stays in the JSON and
/// in the `-v` log.
pub fn first_clause(reason: &str) -> String {
    let (subject, rest) = match reason.split_once(": ") {
        Some((s, r)) if !s.contains(['(', ';']) => (format!("{s}: "), r),
        _ => (String::new(), reason),
    };
    let end = rest.find(['(', ';']).unwrap_or(rest.len());
    let clause = format!("{subject}{}", rest[..end].trim_end());
    if clause.chars().count() > MAX_REASON {
        let cut: String = clause.chars().take(MAX_REASON).collect();
        let head = cut.rsplit_once(' ').map_or(cut.as_str(), |(h, _)| h);
        format!("{head} ...")
    } else if end < rest.len() {
        format!("{clause} ...")
    } else {
        clause
    }
}

/// The report's first line: the mode label (`label`, e.g.
/// [`RunReport::label`]), what ran, vCPUs and iterations, e.g.
/// `ipivmm: mode kernel/x2apic/icr, workload pingpong (target halt), 2 vCPUs, 1000 iterations + 100 warm-up`.
pub fn header_line(m: &RunConfig, label: &str) -> String {
    let what = match &m.payload {
        Some(p) => format!("payload {p}"),
        None => format!("workload {} (target {})", m.workload, m.target),
    };
    let mut line = format!(
        "ipivmm: mode {label}, {what}, {} vCPUs, {} iterations + {} warm-up",
        m.vcpus, m.iterations, m.warmup
    );
    if m.oversubscribed() {
        line.push_str(&format!(
            " (oversubscribed: {} vCPUs on {} host CPUs)",
            m.vcpus, m.host_cpus
        ));
    }
    line
}

/// The header row of the per-phase tables: vCPU, APIC, the columns of
/// [`PhaseResult::COLUMNS`], exits/IPI and wall time.
pub fn phase_header() -> Vec<&'static str> {
    let mut header = vec!["vCPU", "APIC"];
    header.extend(PhaseResult::COLUMNS.iter().map(|c| c.header));
    header.extend(["exits/IPI", "wall"]);
    header
}

/// Most phases the text report shows a table for; the JSON has them all.
pub const MAX_TEXT_PHASES: usize = 32;
/// Most records per vCPU and phase the text report lists.
pub const MAX_TEXT_RECORDS: usize = 16;
/// Most rows of the latency table.
pub const MAX_TEXT_LATENCY_ROWS: usize = 64;

/// A phase of the report: its id and name (an id reused under another
/// name, or named differently per vCPU, is another phase).
type Key<'a> = (u32, &'a str);

/// Distinct (id, name) of phases in the order vCPU 0 (or any) ended them
/// ([`ipivmm_analysis::results::summary::phase_keys`]).
pub fn phase_ids(r: &RunReport) -> Vec<(u32, String)> {
    r.phase_keys()
}

/// The first `max` of [`phase_ids`] and how many more there are (in time
/// linear in the phases, whatever a guest sent).
pub fn phase_ids_bounded(r: &RunReport, max: usize) -> (Vec<(u32, String)>, usize) {
    let mut ids = phase_ids(r);
    let more = ids.len().saturating_sub(max);
    ids.truncate(max);
    (ids, more)
}

/// One line per vCPU that ran the phase more than once: its table row is
/// the first run; the headline counts every run, the JSON and CSV list each.
fn repeats(r: &RunReport, (id, name): Key) -> Vec<String> {
    r.vcpus
        .iter()
        .filter_map(|v| {
            let n = v.phases_of(id, name).count();
            (n > 1).then(|| {
                format!(
                    "  vcpu{} ran this phase {n} times: the row is its first run; the headline counts all, the JSON and CSV list each",
                    v.index
                )
            })
        })
        .collect()
}

/// One line per vCPU on which phase `key` was still open when its payload
/// sent Done (its window ends at Done, not at an end marker).
fn unfinished(r: &RunReport, (id, name): Key) -> Vec<String> {
    r.vcpus
        .iter()
        .filter(|v| v.phases_of(id, name).any(|p| p.unfinished))
        .map(|v| {
            format!(
                "  UNFINISHED on vcpu{}: the payload sent Done with this phase open; its figures run to Done, not to an end marker",
                v.index
            )
        })
        .collect()
}

/// Most phase ids listed per vCPU in the samples-without-phase lines.
const MAX_TEXT_ORPHAN_PHASES: usize = 8;

/// One line per vCPU whose guest sent samples for phases that never ended
/// (they are in no phase, so in no table or figure).
fn samples_without_phase(r: &RunReport) -> Vec<String> {
    r.vcpus
        .iter()
        .filter(|v| !v.samples_without_phase.is_empty())
        .map(|v| {
            let mut by: Vec<String> = v
                .samples_without_phase
                .iter()
                .take(MAX_TEXT_ORPHAN_PHASES)
                .map(|(id, n)| format!("phase {id}: {n}"))
                .collect();
            let more = v
                .samples_without_phase
                .len()
                .saturating_sub(MAX_TEXT_ORPHAN_PHASES);
            if more > 0 {
                by.push(format!("... {more} more phases (see the JSON)"));
            }
            format!(
                "vcpu{}: {} samples dropped: their phase never ended on this vCPU (never began, or still open at the end) ({})",
                v.index,
                v.samples_without_phase_total(),
                by.join(", ")
            )
        })
        .collect()
}

fn opt(v: Option<u64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

fn per(num: u64, den: u64) -> String {
    if den == 0 {
        "-".into()
    } else {
        format!("{:.2}", num as f64 / den as f64)
    }
}

/// One line per vCPU: its exits in the phase by reason, from `kvm_exit`
/// where that tracepoint fired, else from KVM's per-kind exit stats (the
/// rest `other`) and a line of the stats that say what else KVM did
/// (`insn_emulation`...); then what `other` and each stat count.
fn exit_reasons(r: &RunReport, (id, name): Key) -> Vec<String> {
    let mut lines = Vec::new();
    for v in &r.vcpus {
        let Some(p) = v.phase_of(id, name) else {
            continue;
        };
        let (source, parts) = if let Some(e) = p.exit_reasons.as_ref().filter(|e| e.exits > 0) {
            ("sampled kvm_exit", sampled_parts(e))
        } else if !p.exits_by_reason().is_empty() {
            let parts = p
                .exits_by_reason()
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            ("kvm_exit counters", parts)
        } else {
            (Source::KvmStats.key(), stat_parts(p))
        };
        if !parts.is_empty() {
            lines.push(format!(
                "  vcpu{} exits by reason ({source}): {}",
                v.index,
                parts.join(" ")
            ));
        }
        // Exits by stats only: what else KVM did, by the stats that say.
        if source == Source::KvmStats.key() {
            let behind: Vec<String> = KVM_STAT_MEANINGS
                .iter()
                .filter_map(|(k, _)| {
                    p.kvm_stats
                        .get(*k)
                        .filter(|n| **n > 0)
                        .map(|n| format!("{k}={n}"))
                })
                .collect();
            if !behind.is_empty() {
                lines.push(format!(
                    "  vcpu{} what KVM did (KVM stats): {}",
                    v.index,
                    behind.join(" ")
                ));
            }
        }
    }
    lines.extend(stat_meanings(r, (id, name)));
    lines
}

/// What each KVM stat shown after the exits counts, once per phase.
fn stat_meanings(r: &RunReport, (id, name): Key) -> Vec<String> {
    let pvm = r
        .host_settings
        .as_ref()
        .is_some_and(|h| h.backend == ipivmm::host::KvmBackend::KvmPvm);
    let phases: Vec<&PhaseResult> = r
        .vcpus
        .iter()
        .filter_map(|v| v.phase_of(id, name))
        .collect();
    let by_stats = phases.iter().all(|p| {
        p.exit_reasons.as_ref().is_none_or(|e| e.exits == 0) && p.exits_by_reason().is_empty()
    });
    if !by_stats {
        return Vec::new();
    }
    let other = phases
        .iter()
        .any(|p| stat_parts(p).iter().any(|s| s.starts_with("other=")));
    let other = other.then(|| {
        "    other: exits none of KVM's per-kind exit stats counts (kvm_exit, which names each exit's reason, \
         does not fire here)"
            .to_string()
    });
    let stats = KVM_STAT_MEANINGS
        .iter()
        .filter(|(k, _)| {
            phases
                .iter()
                .any(|p| p.kvm_stats.get(*k).is_some_and(|n| *n > 0))
        })
        .map(|(k, meaning)| match (*k, pvm) {
            ("insn_emulation", true) => format!("    {k}: {meaning}; {PVM_EMULATION}"),
            ("insn_emulation_fail", true) => format!("    {k}: {meaning}; {PVM_EMULATION_FAIL}"),
            _ => format!("    {k}: {meaning}"),
        });
    other.into_iter().chain(stats).collect()
}

/// `reason=count (mean host time)`, busiest first, then what was lost.
fn sampled_parts(e: &ipivmm_analysis::results::ExitReasonCounts) -> Vec<String> {
    let mut reasons: Vec<_> = e.by_reason.iter().collect();
    reasons.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
    let mut parts: Vec<String> = reasons
        .into_iter()
        .map(|(k, r)| match r.mean_ns() {
            Some(ns) => format!("{k}={} ({})", r.count, crate::output::style::human_ns(ns)),
            None => format!("{k}={}", r.count),
        })
        .collect();
    if !e.complete {
        let missing = e
            .missing
            .filter(|m| *m > 0)
            .map(|m| format!(", {m} exits of KVM's exits stat not sampled"))
            .unwrap_or_default();
        parts.push(format!("INCOMPLETE: {} records lost{missing}", e.lost));
    }
    parts
}

/// KVM's per-kind exit stats, and the rest as `other`.
fn stat_parts(p: &ipivmm_analysis::results::PhaseResult) -> Vec<String> {
    let total = p.kvm_stats.get("exits").copied().unwrap_or(0);
    let mut named: u64 = 0;
    let mut parts: Vec<String> = p
        .kvm_stat_exits()
        .map(|(k, n)| {
            named = named.saturating_add(n);
            format!("{}={n}", k.trim_end_matches("_exits"))
        })
        .collect();
    if total > named {
        parts.push(format!("other={}", total - named));
    }
    parts
}

/// What the kernel's `kvm_apicv_inhibit_changed` events said: the lever
/// taking effect (or not), the reasons in effect at the end, lost events.
fn observed_line(r: &RunReport) -> Option<String> {
    let o = r.apicv_observed.as_ref()?;
    let at_end = match o.inhibits_at_end.as_slice() {
        [] => "no inhibit in effect at the end".to_string(),
        i => format!("inhibited at the end by {}", i.join(", ")),
    };
    let lever = o.lever.as_ref().map(|l| {
        if l.observed {
            format!("; the lever took effect ({} set)", l.reason)
        } else {
            format!("; the lever did NOT take effect ({} never set)", l.reason)
        }
    });
    let lost =
        (o.lost > 0).then(|| format!("; {} events lost, the list may be incomplete", o.lost));
    let n = o.changes.len();
    Some(format!(
        "APICv observed: {n} inhibit change{}, {at_end}{}{}",
        if n == 1 { "" } else { "s" },
        lever.unwrap_or_default(),
        lost.unwrap_or_default()
    ))
}

/// APICv/AVIC over one phase, from the inhibit events (VM-wide: vCPU 0's view).
fn phase_apicv_line(r: &RunReport, (id, name): Key) -> Option<String> {
    let a = r
        .vcpus
        .iter()
        .find_map(|v| v.phase_of(id, name)?.apicv.as_ref())?;
    Some(if a.active {
        "  APICv/AVIC: active for the whole phase".to_string()
    } else if a.inhibits.is_empty() {
        "  APICv/AVIC: not active (the host has none)".to_string()
    } else {
        format!(
            "  APICv/AVIC: inhibited during the phase by {}",
            a.inhibits.join(", ")
        )
    })
}

/// With halting targets: how many IPIs found their target halted, from the
/// receivers' HLT exits over the IPIs they took (each halt needs a wake-up).
fn halted_line(r: &RunReport, (id, name): Key) -> Option<String> {
    if r.mode.target == ipivmm_analysis::mode::TargetWait::Spin {
        return None;
    }
    let phases = r.vcpus.iter().filter_map(|v| v.phase_of(id, name));
    let (halts, received) =
        phases
            .filter(|p| p.guest.ipis_received > 0)
            .fold((0u64, 0u64), |(h, n), p| {
                (
                    h.saturating_add(p.halt_exits()),
                    n.saturating_add(p.guest.ipis_received),
                )
            });
    (received > 0).then(|| {
        format!(
            "  targets halted: {} of {received} IPIs found their target halted (receivers' HLT exits / IPIs received)",
            halts.min(received)
        )
    })
}

/// With halting targets: what KVM's halt polling did in the phase (its
/// stats summed over the vCPUs, `kvm_vcpu_wakeup` where counted) and the
/// limit it ran under.
fn halt_polling_line(r: &RunReport, (id, name): Key) -> Option<String> {
    if r.mode.target == ipivmm_analysis::mode::TargetWait::Spin {
        return None;
    }
    let phases: Vec<_> = r.vcpus.iter().flat_map(|v| v.phases_of(id, name)).collect();
    let h = ipivmm_analysis::results::lever_effect::HaltPolling::of(r, &phases)?;
    let limit = match h.limit_ns {
        Some((ns, ipivmm_analysis::results::lever_effect::LimitSource::Vm)) => {
            format!(", halt_poll_ns {ns} (the VM's)")
        }
        Some((ns, _)) => format!(", halt_poll_ns {ns} (the host's)"),
        None => String::new(),
    };
    (h.halts > 0).then(|| format!("  halt polling: {}{limit}", h.counts_line()))
}

/// One line per vCPU with the values the payload recorded in the phase
/// (`Record` messages), e.g. `  vcpu0 records: port=128 value=255`.
pub fn records(r: &RunReport, (id, name): (u32, &str)) -> Vec<String> {
    r.vcpus
        .iter()
        .filter_map(|v| {
            let p = v.phase_of(id, name)?;
            (!p.records.is_empty()).then(|| {
                let mut kv: Vec<String> = p
                    .records
                    .iter()
                    .take(MAX_TEXT_RECORDS)
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let more = p.records.len().saturating_sub(MAX_TEXT_RECORDS);
                if more > 0 {
                    kv.push(format!("... {more} more records (see the JSON)"));
                }
                format!("  vcpu{} records: {}", v.index, kv.join(" "))
            })
        })
        .collect()
}

/// Per-vCPU rows shown in full up to this many vCPUs; beyond, the first
/// [`COLLAPSED_HEAD`] rows and the outliers ([`fit::collapse`]), unless `--wide`.
pub const MAX_FULL_VCPU_ROWS: usize = 8;
/// Rows always shown of a collapsed per-vCPU table (vcpu0 sends in most workloads).
const COLLAPSED_HEAD: usize = 2;
/// Most outlier rows of a collapsed per-vCPU table.
const MAX_OUTLIER_ROWS: usize = 6;

/// The columns of [`phase_table`]: [`phase_header`], each with its rank.
fn phase_cols() -> Vec<Col> {
    let mut cols = vec![Col::key("vCPU"), Col::figure("APIC", 0)];
    cols.extend(
        PhaseResult::COLUMNS
            .iter()
            .map(|c| Col::figure(c.header, c.rank)),
    );
    cols.extend([Col::figure("exits/IPI", 9), Col::figure("wall", 3)]);
    cols
}

fn phase_table(r: &RunReport, (id, name): Key, layout: Layout) -> String {
    let mut rows: Vec<fit::Row> = Vec::new();
    for v in &r.vcpus {
        let Some(p) = v.phase_of(id, name) else {
            continue;
        };
        let kvm_exits = p.kvm_stats.get("exits").copied();
        let ipis = p.guest.ipis_sent.max(p.guest.ipis_received);
        // vCPU and APIC ID are names, not figures: no outliers there.
        let mut values: Vec<Option<f64>> = vec![None, None];
        values.extend(
            PhaseResult::COLUMNS
                .iter()
                .map(|c| (c.value)(p).map(|v| v as f64)),
        );
        values.push(kvm_exits.and_then(|e| (ipis > 0).then(|| e as f64 / ipis as f64)));
        values.push(Some(p.wall_ns as f64));
        let mut cells = vec![format!("vcpu{}", v.index), v.apic_id.to_string()];
        cells.extend(PhaseResult::COLUMNS.iter().map(|c| opt((c.value)(p))));
        cells.push(kvm_exits.map_or("-".into(), |e| per(e, ipis)));
        cells.push(ms(p.wall_ns));
        rows.push(fit::Row { cells, values });
    }
    let mut t = FitTable::new(phase_cols());
    let (rows, hidden) = match layout {
        Layout::Fit if rows.len() > MAX_FULL_VCPU_ROWS => {
            fit::collapse(rows, COLLAPSED_HEAD, MAX_OUTLIER_ROWS)
        }
        _ => (rows, None),
    };
    for row in rows {
        t.add_row(row.cells);
    }
    let mut text = t.render(layout);
    if let Some(h) = hidden {
        text.push_str(&format!("\n  {}", h.note("vCPUs")));
    }
    text
}

fn latency_table(r: &RunReport, layout: Layout) -> Option<(String, usize)> {
    let all = r
        .vcpus
        .iter()
        .flat_map(|v| v.phases.iter().map(move |p| (v.index, p)))
        .filter(|(_, p)| p.latency.is_some());
    let mut rows: Vec<(usize, &PhaseResult)> = Vec::new();
    let mut more = 0;
    for row in all {
        if rows.len() < MAX_TEXT_LATENCY_ROWS {
            rows.push(row);
        } else {
            more += 1;
        }
    }
    if rows.is_empty() {
        return None;
    }
    let mut t = FitTable::new(vec![
        Col::key("vCPU"),
        Col::key("phase"),
        Col::figure("count", 6),
        Col::figure("min", 3),
        Col::figure("p50", 9),
        Col::figure("p90", 4),
        Col::figure("p99", 8),
        Col::figure("max", 5),
        Col::figure("mean", 2),
        Col::figure("p50 ns", 7),
        Col::figure("p99 ns", 1),
    ]);
    for (i, p) in rows {
        let Some(l) = &p.latency else { continue };
        let ns = |f: fn(&ipivmm_analysis::results::latency::LatencyNs) -> f64| {
            l.ns.as_ref().map_or("-".into(), |n| format!("{:.0}", f(n)))
        };
        t.add_row(vec![
            format!("vcpu{i}"),
            p.name.clone(),
            l.count.to_string(),
            l.min.to_string(),
            l.p50.to_string(),
            l.p90.to_string(),
            l.p99.to_string(),
            l.max.to_string(),
            format!("{:.0}", l.mean),
            ns(|n| n.p50),
            ns(|n| n.p99),
        ]);
    }
    Some((t.render(layout), more))
}
/// The headline metrics of the measured phase in one line
/// ([`ipivmm_analysis::results::metrics::Metric::shown`]), e.g. `headline ('measure',
/// all vCPUs): cycles/broadcast p50 26720070, ..., exits/IPI 13.71`.
fn metrics_line(r: &RunReport) -> Option<String> {
    let s = r.summary();
    let phase = s.phase.clone()?;
    let shown = ipivmm_analysis::results::metrics::Metric::shown(s.ipis_per_operation());
    let parts: Vec<String> = shown
        .iter()
        .filter_map(|m| {
            Some(format!(
                "{} {}",
                m.name(s.operation),
                m.format(m.value(&s)?)
            ))
        })
        .collect();
    let from = match &s.latency_phase {
        Some(l) if *l != phase => {
            format!("latency from '{l}' (nothing per-exit counted), exits from '{phase}'")
        }
        _ => format!("'{phase}'"),
    };
    (!parts.is_empty()).then(|| {
        format!(
            "headline ({from}; exits and IPIs summed over all vCPUs): {}",
            parts.join(", ")
        )
    })
}

/// What the phase header says of a measured phase's two parts: the
/// uncounted one (per-exit counters off, the headline latency) and the
/// counted one (the exits).
fn part_note(r: &RunReport, (id, name): Key) -> &'static str {
    let mut ps = r.vcpus.iter().flat_map(|v| v.phases_of(id, name));
    match ps.next() {
        Some(p) if p.uncounted => {
            " (uncounted part: every per-exit counter off; the headline latency)"
        }
        Some(_)
            if r.uncounted_part(id, name).is_some() =>
        {
            " (counted part: exits by reason, ICR-write exits; its latency shows what counting cost)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_reason_is_one_short_clause() {
        let long =
            "kvm_pvm backend: kvm:kvm_exit never fires (software KVM without VMX/SVM exits), \
                    so no exit is counted by reason; totals come from KVM's binary stats";
        assert_eq!(
            first_clause(long),
            "kvm_pvm backend: kvm:kvm_exit never fires ..."
        );
        assert_eq!(first_clause("not root"), "not root");
        let words = "word ".repeat(40);
        let cut = first_clause(&words);
        assert!(
            cut.chars().count() <= MAX_REASON + 4 && cut.ends_with(" ..."),
            "{cut}"
        );
        assert_eq!(first_clause(""), "");
    }

    /// Issue 39: where only KVM's stats count exits (kvm_pvm), the exits
    /// no per-kind stat counts (`other`) and the stats that say what else
    /// KVM did are named with what they count, the emulation failures said
    /// to be no error (`other=N` alone read as a bug to a KVM engineer).
    #[test]
    fn stats_only_exits_name_the_stats_that_explain_them() {
        let host = ipivmm_host::facts::HostInfo::synthetic(ipivmm::host::KvmBackend::KvmPvm, false);
        let mut r = ipivmm::VmConfig::default().not_started("test");
        r.host_settings = Some(ipivmm_analysis::results::HostSettings::of(&host));
        for (i, (emulated, failed)) in [(19_089u64, 80u64), (24_563, 20)].into_iter().enumerate() {
            let mut v = ipivmm_analysis::results::VcpuResult::new(i, 0);
            let mut p = PhaseResult {
                id: 2,
                name: "measure".into(),
                ..Default::default()
            };
            for (k, n) in [
                ("exits", 21),
                ("halt_exits", 0),
                ("insn_emulation", emulated),
                ("insn_emulation_fail", failed),
            ] {
                p.kvm_stats.insert(k.into(), n);
            }
            v.phases.push(p);
            r.vcpus.push(v);
        }
        let lines = exit_reasons(&r, (2, "measure"));
        let text = lines.join("\n");
        assert!(
            text.contains("  vcpu0 exits by reason (kvm_stats): other=21"),
            "{text}"
        );
        assert!(
            text.contains(
                "  vcpu0 what KVM did (KVM stats): insn_emulation=19089 insn_emulation_fail=80"
            ),
            "{text}"
        );
        assert!(
            text.contains("    other: exits none of KVM's per-kind exit stats counts"),
            "{text}"
        );
        assert!(
            text.contains("    insn_emulation: instructions KVM's instruction emulator ran"),
            "{text}"
        );
        assert!(
            text.contains("LFENCE") && text.contains("not an error"),
            "{text}"
        );
        // Once per phase, not per vCPU.
        assert_eq!(
            text.matches("    insn_emulation_fail: ").count(),
            1,
            "{text}"
        );
        // Counted by kvm_exit (a hardware host), the reasons need no key.
        r.vcpus[0].phases[0].exit_reasons = Some(ipivmm_analysis::results::ExitReasonCounts {
            exits: 3,
            ..Default::default()
        });
        assert!(stat_meanings(&r, (2, "measure")).is_empty());
    }
}
