//! The gate's operating characteristic (issues 40 and 47): how often it
//! passes what did not change, catches what did, and raises false alarms,
//! over result documents of known spread, drift and effect — each
//! repeat's latency drawn log-normal with σ 0.11 (the spread measured on
//! this project's quiet host, docs/statistics.md), each recording (file)
//! shifted as a whole by a log-normal drift (log sd 0.07 measured between
//! recordings here), counts exact, hosts quiet — judged end to end
//! (documents → `compare` → the gate), 200 pairs a cell, and the live
//! comparison's sequential rule over simulated rounds (beside the one
//! test of the whole budget: what looking early costs). Seeded: the figures
//! are the same on every run, so a change of the gate that moves them past
//! the bounds below fails here. The table it prints (`--nocapture`) is the
//! one docs/statistics.md gives.
//!
//! Which cell catches which correction's removal (measured by removing
//! each, docs/statistics.md): the drift rule (one baseline file, no
//! profile: latency undecided) by "one baseline, drift 0.07"; Holm's
//! correction by "12 rows × 5 repeats, identical" and "12 rows, 30
//! repeats"; the discrete (Tarone) shares by "12 rows × 5 repeats, +30%".
mod output_fixtures;

use ipivmm_analysis::compare::{Comparison, Dimension, GateOptions};
use ipivmm_analysis::gate::sequential::{Endpoint, Sequential};
use ipivmm_analysis::gate::{Decision, Evidence, Policy, Scale, Verdict};
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_analysis::results::Document;
use ipivmm_testkit::rng::Rng;
use output_fixtures::report;

/// The spread of a repeat's p50 (log sd).
const SIGMA: f64 = 0.11;
/// The drift between recordings measured on this project's host (log sd).
const DRIFT: f64 = 0.07;
/// Pairs of documents per cell.
const PAIRS: usize = 200;

/// The flags of `rows` configurations (12 at most).
fn rows(rows: usize) -> Vec<Vec<&'static str>> {
    let mut out = Vec::new();
    for apic in ["xapic", "x2apic"] {
        for irqchip in ["kernel", "split"] {
            for vcpus in ["2", "3", "4"] {
                out.push(vec!["--apic", apic, "--irqchip", irqchip, "--vcpus", vcpus]);
            }
        }
    }
    out.truncate(rows);
    out
}

/// What a cell's comparison has besides the two sides' repeats.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Setup {
    /// One baseline file against one new file, no noise profile.
    OneBaseline,
    /// This many baseline recordings (files) against one new file.
    Baselines(usize),
    /// One baseline file with a noise profile claiming this drift.
    Profile(f64),
    /// One file whose rows ran interleaved (a sweep), compared by APIC
    /// mode: xAPIC the baseline, x2APIC the new side (`--by apic`).
    ByApic,
}

impl Setup {
    fn name(self) -> String {
        match self {
            Setup::OneBaseline => "one baseline".into(),
            Setup::Baselines(k) => format!("{k} baselines"),
            Setup::Profile(d) => format!("profile {d:.2}"),
            Setup::ByApic => "one file, --by apic".into(),
        }
    }
}

/// A document of `repeats` repeats of each of `rows` configurations,
/// every latency `factor` times a log-normal draw, the whole recording
/// shifted by a drift of log sd `drift`; with `x2apic`, the x2APIC rows
/// further × `x2apic`.
fn document(
    r: &mut Rng,
    rows: &[Vec<&str>],
    repeats: u32,
    factor: f64,
    drift: f64,
    x2apic: f64,
) -> Document {
    let shift = (drift * r.normal()).exp();
    let mut runs = Vec::new();
    for flags in rows {
        let f = if flags.contains(&"x2apic") {
            x2apic
        } else {
            1.0
        };
        for i in 0..repeats {
            let base = r.log_normal(400_000.0 * factor * shift * f, SIGMA).round() as u64;
            let mut run = report(flags, base, 3);
            run.repeat = Some(i);
            runs.push(run);
        }
    }
    Document::new(runs, Vec::new())
}

/// The rows of a `--by apic` cell: `n` configurations (irqchip × vCPUs),
/// each in both APIC modes.
fn apic_rows(n: usize) -> Vec<Vec<&'static str>> {
    let mut out = Vec::new();
    for irqchip in ["kernel", "split"] {
        for vcpus in ["2", "3", "4", "5", "6", "7"] {
            for apic in ["xapic", "x2apic"] {
                out.push(vec!["--apic", apic, "--irqchip", irqchip, "--vcpus", vcpus]);
            }
        }
    }
    out.truncate(2 * n);
    out
}

/// One cell's shares of pairs that exit 0, 1 and 4, and the first
/// undecided endpoint's proposed repeats (to check that they are named).
#[derive(Clone, Copy, Debug)]
struct Rates {
    pass: f64,
    fail: f64,
    undecided: f64,
    needs: Option<usize>,
}

fn cell(seed: u64, rows_n: usize, repeats: u32, effect: f64, drift: f64, setup: Setup) -> Rates {
    let mut r = Rng::new(seed);
    let (mut pass, mut fail, mut undecided) = (0, 0, 0);
    let mut needs = None;
    for _ in 0..PAIRS {
        let (c, opts) = match setup {
            Setup::ByApic => {
                let doc = document(&mut r, &apic_rows(rows_n), repeats, 1.0, drift, effect);
                let c = Comparison::by(
                    &[("sweep.json".to_string(), doc)],
                    Dimension::Apic,
                    &["xapic".to_string()],
                )
                .unwrap();
                (c, GateOptions::default())
            }
            _ => {
                let rows = rows(rows_n);
                let k = match setup {
                    Setup::Baselines(k) => k,
                    _ => 1,
                };
                let mut docs = Vec::new();
                let mut names = Vec::new();
                for b in 0..k {
                    let name = format!("base{b}.json");
                    docs.push((
                        name.clone(),
                        document(&mut r, &rows, repeats, 1.0, drift, 1.0),
                    ));
                    names.push(name);
                }
                docs.push((
                    "new.json".to_string(),
                    document(&mut r, &rows, repeats, effect, drift, 1.0),
                ));
                let c = Comparison::by(&docs, Dimension::File, &names).unwrap();
                let opts = GateOptions {
                    drift: match setup {
                        Setup::Profile(d) => Some(d),
                        _ => None,
                    },
                    ..GateOptions::default()
                };
                (c, opts)
            }
        };
        let g = c.gate(&opts);
        match g.verdict() {
            Verdict::Pass => pass += 1,
            Verdict::Fail => fail += 1,
            _ => undecided += 1,
        }
        if needs.is_none() {
            needs = g.family.judged.iter().find_map(|j| match &j.outcome {
                Decision::Undecided { needs, .. } => *needs,
                _ => None,
            });
        }
    }
    let n = PAIRS as f64;
    Rates {
        pass: pass as f64 / n,
        fail: fail as f64 / n,
        undecided: undecided as f64 / n,
        needs,
    }
}

#[test]
fn files_of_known_spread_drift_and_effect() {
    println!("setup | drift | repeats a side | rows | effect | exit 0 | exit 1 | exit 4");
    let mut table = Vec::new();
    for (seed, setup, drift, repeats, rows, effect) in [
        // A quiet host (no drift between recordings), latency decided by
        // several baseline recordings or by a profile of its drift.
        (1, Setup::Baselines(4), 0.0, 30, 1, 1.0),
        (2, Setup::Baselines(4), 0.0, 30, 1, 1.16),
        (3, Setup::Baselines(4), 0.0, 30, 1, 1.20),
        (4, Setup::Baselines(4), 0.0, 30, 12, 1.0),
        (21, Setup::Profile(0.02), 0.0, 30, 1, 1.0),
        (22, Setup::Profile(0.02), 0.0, 30, 1, 1.16),
        (23, Setup::Profile(0.02), 0.0, 30, 1, 1.20),
        (24, Setup::Profile(0.02), 0.0, 30, 12, 1.0),
        // The drift measured here, log sd 0.07.
        (31, Setup::OneBaseline, DRIFT, 30, 1, 1.0),
        (32, Setup::OneBaseline, DRIFT, 30, 1, 1.20),
        (33, Setup::Baselines(5), DRIFT, 30, 1, 1.0),
        (34, Setup::Baselines(5), DRIFT, 30, 1, 1.20),
        (35, Setup::Profile(DRIFT), DRIFT, 30, 1, 1.0),
        (36, Setup::Profile(DRIFT), DRIFT, 30, 1, 1.20),
        // Rows of one file (interleaved), the rank-sum test.
        (5, Setup::ByApic, 0.0, 5, 1, 1.0),
        (6, Setup::ByApic, 0.0, 5, 1, 1.20),
        (7, Setup::ByApic, 0.0, 10, 1, 1.0),
        (8, Setup::ByApic, 0.0, 10, 1, 1.16),
        (41, Setup::ByApic, 0.0, 5, 12, 1.0),
        (42, Setup::ByApic, 0.0, 5, 12, 1.30),
        (43, Setup::ByApic, 0.0, 30, 12, 1.0),
    ] {
        let c = cell(seed, rows, repeats, effect, drift, setup);
        println!(
            "{:>20} | {drift:.2} | {repeats:>14} | {rows:>4} | ×{effect:.2}  | {:>5.1}% | {:>5.1}% | {:>5.1}%{}",
            setup.name(),
            c.pass * 100.0,
            c.fail * 100.0,
            c.undecided * 100.0,
            c.needs.map_or(String::new(), |n| format!(
                "  (an undecided one: ~{n} a side)"
            ))
        );
        table.push(((setup, drift, repeats, rows, effect), c));
    }
    let at = |k: (Setup, f64, u32, usize, f64)| table.iter().find(|(x, _)| *x == k).unwrap().1;
    // No false regression beyond α, and no false pass of a real +20%, in
    // any cell: α plus the sampling error of 200 pairs (a single endpoint
    // held to α exits 1 on about α of identical pairs by design).
    for (k, c) in &table {
        if k.4 == 1.0 {
            assert!(c.fail <= 0.08, "identical {k:?}: {c:?}");
        }
        if k.4 >= 1.2 {
            assert!(c.pass <= 0.05, "+20% or more {k:?}: {c:?}");
        }
    }
    // Issue 47 (b): one baseline under drift never turns it into a
    // verdict on latency (without the drift rule: exit 1 on ~20%).
    let one = at((Setup::OneBaseline, DRIFT, 30, 1, 1.0));
    assert!(one.fail <= 0.05, "drift, one baseline, identical: {one:?}");
    let one = at((Setup::OneBaseline, DRIFT, 30, 1, 1.20));
    assert!(one.pass <= 0.05, "drift, one baseline, +20%: {one:?}");
    // Issue 47 (c): 12 rows at 5 repeats can still flag +30% (Holm over
    // all 36 endpoints: 0%), and stay quiet when nothing changed.
    let c = at((Setup::ByApic, 0.0, 5, 12, 1.30));
    assert!(c.fail >= 0.50, "12 rows × 5 repeats, +30%: {c:?}");
    // Holm (without it: many rows, many chances of a false alarm).
    for k in [
        (Setup::ByApic, 0.0, 5, 12, 1.0),
        (Setup::ByApic, 0.0, 30, 12, 1.0),
        (Setup::Baselines(4), 0.0, 30, 12, 1.0),
        (Setup::Profile(0.02), 0.0, 30, 12, 1.0),
    ] {
        let c = at(k);
        assert!(c.fail <= 0.05, "12 rows, identical {k:?}: {c:?}");
    }
    let c = at((Setup::ByApic, 0.0, 5, 1, 1.0));
    assert!(
        c.needs.is_some_and(|n| n > 5),
        "the repeats a decision needs: {c:?}"
    );
    // Where latency is decidable on a quiet host: issue 40's figures.
    for (k, pass, fail) in [
        ((Setup::Baselines(4), 0.0, 30, 1, 1.0), 0.75, 0.0),
        ((Setup::Baselines(4), 0.0, 30, 1, 1.16), 0.0, 0.90),
        ((Setup::Baselines(4), 0.0, 30, 1, 1.20), 0.0, 0.95),
        ((Setup::Profile(0.02), 0.0, 30, 1, 1.0), 0.80, 0.0),
        ((Setup::Profile(0.02), 0.0, 30, 1, 1.16), 0.0, 0.90),
        ((Setup::Profile(0.02), 0.0, 30, 1, 1.20), 0.0, 0.95),
        ((Setup::ByApic, 0.0, 10, 1, 1.16), 0.0, 0.70),
    ] {
        let c = at(k);
        assert!(c.pass >= pass && c.fail >= fail, "{k:?}: {c:?}");
    }
    // Under the drift measured here, several recordings still catch some
    // of a +20% and never pass it.
    let c = at((Setup::Baselines(5), DRIFT, 30, 1, 1.20));
    assert!(c.fail >= 0.40, "drift, 5 baselines, +20%: {c:?}");
}

/// A sweep file of 10 repeats of xAPIC (3 exits per IPI) and of x2APIC
/// (`x2apic_exits` exits per IPI), latencies alike, every run recorded
/// while other processes used 40% of the host.
fn busy_sweep(x2apic_exits: u64) -> Vec<(String, Document)> {
    let mut r = Rng::new(47);
    let mut runs = Vec::new();
    for apic in ["xapic", "x2apic"] {
        let exits = if apic == "x2apic" { x2apic_exits } else { 3 };
        for i in 0..10 {
            let base = r.log_normal(400_000.0, 0.02).round() as u64;
            let mut run = report(&["--apic", apic], base, exits);
            run.repeat = Some(i);
            run.host_load = Some(ipivmm_analysis::stats::HostLoad {
                cpus: 2,
                busy: 0.9,
                own: 0.5,
                steal: 0.0,
            });
            runs.push(run);
        }
    }
    vec![("sweep.json".to_string(), Document::new(runs, Vec::new()))]
}

fn outcome_of(g: &ipivmm_analysis::compare::GateReport, m: Metric) -> &Decision {
    let i = g.endpoints.iter().position(|e| e.metric == m).unwrap();
    &g.family.judged[i].outcome
}

/// Issue 47, "one judge" 1: load cannot change a count, so a busy host's
/// repeats still decide exact counts (on the old rule every repeat was
/// left out: "no usable repeat", exit 4, even for 3 → 4 exits per IPI);
/// latency leaves them out unless told to keep them, which a caveat says.
#[test]
fn busy_repeats_decide_counts_and_latency_only_when_kept() {
    let by_apic = |docs: &[(String, Document)]| {
        Comparison::by(docs, Dimension::Apic, &["xapic".to_string()]).unwrap()
    };
    let c = by_apic(&busy_sweep(4));
    let g = c.gate(&GateOptions::default());
    assert_eq!(
        outcome_of(&g, Metric::ExitsPerIpi),
        &Decision::Regressed,
        "{g:?}"
    );
    assert_eq!(g.exit_code(), 1);
    let notes = &g.endpoints[g
        .endpoints
        .iter()
        .position(|e| e.metric == Metric::ExitsPerIpi)
        .unwrap()]
    .notes;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("kept: load cannot change a count")),
        "{notes:?}"
    );
    let c = by_apic(&busy_sweep(3));
    let g = c.gate(&GateOptions::default());
    assert!(
        matches!(
            outcome_of(&g, Metric::CyclesPerOpP50),
            Decision::Undecided { .. }
        ),
        "{g:?}"
    );
    assert_eq!(outcome_of(&g, Metric::ExitsPerIpi), &Decision::Equivalent);
    assert_eq!(g.exit_code(), 4);
    let kept = GateOptions {
        keep_busy: true,
        ..GateOptions::default()
    };
    let g = c.gate(&kept);
    assert_eq!(
        outcome_of(&g, Metric::CyclesPerOpP50),
        &Decision::Equivalent,
        "{g:?}"
    );
    assert_eq!(g.exit_code(), 0);
    assert!(
        g.caveats.iter().any(|c| c.contains("busy host were kept")),
        "{:?}",
        g.caveats
    );
}

/// Issue 47 (b): two files, one recording a side, no profile: latency is
/// undecided with the why and the fix; exact counts are judged; several
/// baseline recordings or a profile decide latency again.
#[test]
fn one_recording_a_side_leaves_latency_undecided_and_names_the_fix() {
    let mut r = Rng::new(4747);
    let rows = rows(1);
    let mut doc = |f: f64| document(&mut r, &rows, 10, f, 0.0, 1.0);
    let (b1, b2, b3, same, slow) = (doc(1.0), doc(1.0), doc(1.0), doc(1.0), doc(1.5));
    let files = |v: Vec<(&str, &Document)>| -> Vec<(String, Document)> {
        v.into_iter()
            .map(|(n, d)| (n.to_string(), d.clone()))
            .collect()
    };
    for new in [&same, &slow] {
        let c = Comparison::by(
            &files(vec![("b1.json", &b1), ("new.json", new)]),
            Dimension::File,
            &[],
        )
        .unwrap();
        let g = c.gate(&GateOptions::default());
        match outcome_of(&g, Metric::CyclesPerOpP50) {
            Decision::Undecided { why, .. } => {
                for fix in [
                    "--baseline A --baseline B",
                    "ipivmm calibrate",
                    "compare --run",
                ] {
                    assert!(why.contains(fix), "{why}");
                }
            }
            o => panic!("{o:?}"),
        }
        assert_eq!(outcome_of(&g, Metric::ExitsPerIpi), &Decision::Equivalent);
        assert_eq!(
            g.exit_code(),
            4,
            "×1.5 is not exit 1 without drift evidence"
        );
        assert!(
            g.caveats.iter().any(|c| c.contains("left undecided")),
            "{:?}",
            g.caveats
        );
        // A profile's drift decides.
        let g = c.gate(&GateOptions {
            drift: Some(0.02),
            ..GateOptions::default()
        });
        assert!(
            !matches!(
                outcome_of(&g, Metric::CyclesPerOpP50),
                Decision::Undecided { .. }
            ),
            "{g:?}"
        );
    }
    // Several baseline recordings decide: ×1.5 regressed.
    let c = Comparison::by(
        &files(vec![
            ("b1.json", &b1),
            ("b2.json", &b2),
            ("b3.json", &b3),
            ("slow.json", &slow),
        ]),
        Dimension::File,
        &["b1.json", "b2.json", "b3.json"].map(String::from),
    )
    .unwrap();
    let g = c.gate(&GateOptions::default());
    assert_eq!(
        outcome_of(&g, Metric::CyclesPerOpP50),
        &Decision::Regressed,
        "{g:?}"
    );
    // Counts that agree are exact counts (no share of α), not recordings.
    let exits = g
        .endpoints
        .iter()
        .position(|e| e.metric == Metric::ExitsPerIpi)
        .unwrap();
    let t = g.family.judged[exits].test.as_ref().unwrap();
    assert!(t.exact, "{t:?}");
}

/// The live comparison's rule over simulated rounds: each run's p50 a
/// log-normal draw (σ per run) on a slowly drifting host (an AR(1) drift
/// both runs of a round share), heavy-tailed outliers where `heavy` (one
/// run in ten delayed by a half-normal of sd 0.6: a busy host's
/// preemptions), looking when due from the fifth round, within
/// `max_rounds` (21: what a 5-minute budget gave at 7 s a VM; 300: what it
/// gives at today's ~0.5 s a VM).
///
/// Beside it, on the same draws, the best a comparison of that budget can
/// do without looking early: one test of all `max_rounds` rounds at α (a
/// one-look sequence). Its catch rate bounds what any level-α test of
/// "slower by the threshold or more" can catch at this budget, so the gap
/// is what looking early costs.
struct Live {
    pass: f64,
    fail: f64,
    undecided: f64,
    rounds: f64,
    /// The one-look test's share that regressed.
    one_look_fail: f64,
}

fn look_at(s: &mut Sequential, pairs: &[(f64, f64)], last: bool) -> Option<Verdict> {
    let t = Endpoint {
        evidence: Evidence::Paired(pairs.to_vec()),
        scale: Scale::Ratio,
    };
    let look = s.look(pairs.len(), last, vec![Ok(t)]);
    look.stop.map(|_| look.verdict)
}

fn live(seed: u64, effect: f64, sigma: f64, heavy: bool, max_rounds: usize) -> Live {
    let mut r = Rng::new(seed);
    // The rounds the sequence did not need, for the one-look test: drawn
    // apart, so the sequence's draws are those of its cells before the
    // one-look column was added.
    let mut rest = Rng::new(seed ^ 0x5eed);
    let (mut pass, mut fail, mut undecided, mut rounds, mut one_look) = (0, 0, 0, 0, 0);
    let round = |r: &mut Rng, drift: &mut f64| {
        *drift = 0.8 * *drift + 0.05 * r.normal();
        let mut one = |f: f64| {
            let outlier = if heavy && r.chance(0.1) {
                0.6 * r.normal().abs()
            } else {
                0.0
            };
            400_000.0 * f * (*drift + sigma * r.normal() + outlier).exp()
        };
        (one(1.0), one(effect))
    };
    for _ in 0..PAIRS {
        let mut pairs = Vec::with_capacity(max_rounds);
        let mut drift = 0.0;
        let mut s = Sequential::new(1, max_rounds, Policy::DEFAULT);
        for n in 1..=max_rounds {
            pairs.push(round(&mut r, &mut drift));
            if !s.due(n) && n < max_rounds {
                continue;
            }
            if let Some(v) = look_at(&mut s, &pairs, n == max_rounds) {
                match v {
                    Verdict::Pass => pass += 1,
                    Verdict::Fail => fail += 1,
                    _ => undecided += 1,
                }
                rounds += n;
                break;
            }
        }
        while pairs.len() < max_rounds {
            pairs.push(round(&mut rest, &mut drift));
        }
        let mut once = Sequential::new(1, max_rounds, Policy::DEFAULT);
        one_look += usize::from(look_at(&mut once, &pairs, true) == Some(Verdict::Fail));
    }
    let n = PAIRS as f64;
    Live {
        pass: pass as f64 / n,
        fail: fail as f64 / n,
        undecided: undecided as f64 / n,
        rounds: rounds as f64 / n,
        one_look_fail: one_look as f64 / n,
    }
}

#[test]
fn live_rounds_of_known_spread_and_effect() {
    println!(
        "budget | run σ | outliers | effect | exit 0 | exit 1 | exit 4 | mean rounds | one look: exit 1"
    );
    let mut table = Vec::new();
    for (seed, max_rounds, sigma, heavy, effect) in [
        (11, 21, 0.06, false, 1.0),
        (12, 21, 0.06, false, 1.2),
        (13, 21, 0.09, false, 1.0),
        (14, 21, 0.09, false, 1.2),
        (15, 21, 0.06, true, 1.0),
        (16, 21, 0.06, true, 1.2),
        (17, 300, 0.09, false, 1.0),
        (18, 300, 0.09, false, 1.2),
        (19, 300, 0.06, true, 1.0),
        (20, 300, 0.06, true, 1.2),
    ] {
        let l = live(seed, effect, sigma, heavy, max_rounds);
        println!(
            "{max_rounds:>6} | {sigma:.2}  | {:>8} | ×{effect:.2}  | {:>5.1}% | {:>5.1}% | {:>5.1}% | {:>11.1} | {:>5.1}%",
            if heavy { "1 in 10" } else { "none" },
            l.pass * 100.0,
            l.fail * 100.0,
            l.undecided * 100.0,
            l.rounds,
            l.one_look_fail * 100.0,
        );
        table.push(((max_rounds, sigma, heavy, effect), l));
    }
    let at = |k: (usize, f64, bool, f64)| &table.iter().find(|(x, _)| *x == k).unwrap().1;
    let show = |l: &Live| {
        format!(
            "pass {} fail {} one look {}",
            l.pass, l.fail, l.one_look_fail
        )
    };
    // At the spread of consecutive VMs on this host (σ ≈ 0.06 a run).
    let l = at((21, 0.06, false, 1.0));
    assert!(l.pass >= 0.90, "{}", show(l));
    let l = at((21, 0.06, false, 1.2));
    assert!(l.fail >= 0.95, "{}", show(l));
    // A false alarm stays rare wherever: α over the whole sequence.
    for (_, l) in table.iter().filter(|((_, _, _, e), _)| *e == 1.0) {
        assert!(l.fail <= 0.05, "{}", show(l));
    }
    // With outliers, the injected delay is still caught.
    let l = at((21, 0.06, true, 1.2));
    assert!(l.fail >= 0.80, "{}", show(l));
    // Looking early costs little: within 4 points of the one test of the
    // whole budget, the most a level-α test of "slower by the threshold or
    // more" catches in 21 rounds (σ 0.09: about 93% by the normal
    // approximation; the rule that tested "slower than no change" caught
    // 100% here by flagging changes below the threshold too).
    for (k, l) in table.iter().filter(|((_, _, _, e), _)| *e > 1.0) {
        assert!(l.fail >= l.one_look_fail - 0.04, "{k:?}: {}", show(l));
    }
    // At the rounds today's budget allows, the larger spreads are caught
    // too, and identical sides pass.
    for heavy_sigma in [(0.09, false), (0.06, true)] {
        let l = at((300, heavy_sigma.0, heavy_sigma.1, 1.2));
        assert!(l.fail >= 0.97, "{heavy_sigma:?}: {}", show(l));
        let l = at((300, heavy_sigma.0, heavy_sigma.1, 1.0));
        assert!(l.pass >= 0.95, "{heavy_sigma:?}: {}", show(l));
    }
}
