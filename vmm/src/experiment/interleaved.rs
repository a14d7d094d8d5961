//! Two configurations compared live on this host: rounds of one run of
//! each, in random order (so neither side always runs first, and drift
//! and load hit both alike), the rounds analysed as pairs, a look after
//! each round from [`MIN_ROUNDS`], and a stop as soon as every gated
//! figure is decided — or when the budget allows no further round
//! ([`crate::gate::sequential`] keeps the error rates of all those looks
//! those of one test).
//!
//! Load needs no demotion here: both runs of a round see the same host.
//! A run that fails ends the comparison: a failure of the new side is the
//! gate's failure, one of the baseline leaves it undecided.
use super::Budget;
use crate::config::VmConfig;
use crate::gate::sequential::{Look, Sequential, Stop, MIN_ROUNDS};
use crate::gate::{self, Evidence, Outcome, Policy, Scale, Verdict};
use crate::host::load::LoadProbe;
use crate::results::metrics::Metric;
use crate::results::summary::summarize;
use crate::results::RunReport;
use crate::run::{run, RunError, RunOptions};
use ipivmm_devices::budget::SharedBudget;
use ipivmm_devices::serial::SerialSink;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One side of the comparison.
#[derive(Clone, Debug)]
pub struct Arm {
    /// How it is named in reports (the flags it was given).
    pub name: String,
    /// What it runs.
    pub config: VmConfig,
}

/// A live comparison.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The baseline, then the new side.
    pub arms: [Arm; 2],
    /// Threshold, count tolerance, α.
    pub policy: Policy,
    /// The figures judged.
    pub gated: Vec<Metric>,
    /// The most it may spend.
    pub budget: Budget,
    /// Seed of the order of each round's two runs.
    pub seed: u64,
}

/// What a live comparison tells its caller as it goes; every method has
/// a default that does nothing.
pub trait Events {
    /// Run `round` (0-based) of arm `arm` (0 baseline, 1 new) starts.
    fn run_started(&self, _round: usize, _arm: usize) {}
    /// It ended with this report.
    fn run_finished(&self, _round: usize, _arm: usize, _report: &RunReport) {}
    /// The gate looked after a round.
    fn looked(&self, _look: &Look, _max_rounds: usize) {}
}

/// No events.
pub struct Quiet;

impl Events for Quiet {}

/// Why it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every gated figure decided (or one regressed).
    Decided,
    /// No further round fit in the budget.
    Budget,
    /// The caller's cancel flag was set.
    Cancelled,
    /// A run did not complete (which side, and its status).
    RunFailed {
        /// 0 baseline, 1 new.
        arm: usize,
        /// The run's status line.
        status: String,
    },
}

/// What a live comparison found.
#[derive(Clone, Debug)]
pub struct Finding {
    /// Rounds completed.
    pub rounds: usize,
    /// Every run, with its arm, in the order it ran (`repeat` = its round).
    pub reports: Vec<(usize, RunReport)>,
    /// The gated figures, in the order of the look's endpoints.
    pub gated: Vec<Metric>,
    /// The last look, if the gate looked.
    pub look: Option<Look>,
    /// The rounds the budget allowed (as planned at the first look).
    pub max_rounds: usize,
    /// Why it ended.
    pub stopped: Stopped,
    /// Wall time spent.
    pub elapsed: Duration,
}

impl Finding {
    /// The gate's verdict: its last look's, a failure where the new side's
    /// run failed, undecided where the baseline's did or nothing was looked at.
    pub fn verdict(&self) -> Verdict {
        match (&self.stopped, &self.look) {
            (Stopped::RunFailed { arm: 1, .. }, _) => Verdict::Fail,
            (Stopped::RunFailed { .. }, _) => Verdict::Undecided,
            (_, Some(l)) => l.verdict,
            (_, None) => Verdict::Undecided,
        }
    }

    /// The exit status of the verdict.
    pub fn exit_code(&self) -> u8 {
        gate::exit_code(self.verdict())
    }
}

/// A coin for the order of a round (xorshift: reproducible from the seed).
struct Coin(u64);

impl Coin {
    fn flip(&mut self) -> bool {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 & 1 == 1
    }
}

/// The evidence of `metric` over the rounds so far: a pair per round
/// where both runs have the figure.
fn pairs(reports: &[(usize, RunReport)], metric: Metric, rounds: usize) -> Vec<(f64, f64)> {
    let value = |arm: usize, round: usize| {
        reports
            .iter()
            .find(|(a, r)| *a == arm && r.repeat == Some(round as u32))
            .and_then(|(_, r)| metric.value(&summarize(r)))
            .filter(|v| v.is_finite() && (metric.is_count() || *v > 0.0))
    };
    (0..rounds)
        .filter_map(|k| Some((value(0, k)?, value(1, k)?)))
        .collect()
}

/// The endpoints' tests after `rounds` rounds.
fn tests(
    reports: &[(usize, RunReport)],
    spec: &Spec,
    rounds: usize,
) -> Vec<Result<gate::Test, Outcome>> {
    spec.gated
        .iter()
        .map(|&m| {
            let p = pairs(reports, m, rounds);
            if p.is_empty() {
                return Err(Outcome::Undecided {
                    why: format!("{} not measured in both runs of any round", m.key()),
                    needs: None,
                });
            }
            let scale = if m.is_count() {
                Scale::Count
            } else {
                Scale::Ratio
            };
            gate::examine(&Evidence::Paired(p), scale, &spec.policy)
                .map_err(|why| Outcome::Undecided { why, needs: None })
        })
        .collect()
}

/// Runs `spec` until the gate decides, the budget is spent or `cancel`
/// is set. Err: a run could not start (the caller says why).
pub fn run_interleaved(
    spec: &Spec,
    cancel: Arc<AtomicBool>,
    events: &dyn Events,
) -> Result<Finding, RunError> {
    let start = Instant::now();
    // One guest memory budget for every run of the comparison; a run's
    // raw samples go back to it once the run is summarized.
    let budget = Arc::new(SharedBudget::new(spec.arms[0].config.guest_memory_budget));
    let mut coin = Coin(spec.seed | 1);
    let mut reports: Vec<(usize, RunReport)> = Vec::new();
    let mut sequence: Option<Sequential> = None;
    let mut look = None;
    let mut rounds = 0;
    let max_vms = match spec.budget {
        Budget::Vms(n) => Some(n as usize),
        Budget::Time(_) => None,
    };
    let stopped = 'rounds: loop {
        let order = if coin.flip() { [0, 1] } else { [1, 0] };
        for arm in order {
            if cancel.load(Ordering::SeqCst) {
                break 'rounds Stopped::Cancelled;
            }
            events.run_started(rounds, arm);
            let probe = LoadProbe::start();
            let opts = RunOptions {
                serial: SerialSink::Discard,
                started: Instant::now(),
                cancel: Some(cancel.clone()),
                budget: Some(budget.clone()),
            };
            let mut r = run(&spec.arms[arm].config, opts)?;
            r.host_load = probe.and_then(|p| p.finish());
            budget.release(r.drop_samples());
            r.repeat = Some(rounds as u32);
            events.run_finished(rounds, arm, &r);
            let ok = r.succeeded();
            let status = r.status.line();
            reports.push((arm, r));
            if cancel.load(Ordering::SeqCst) {
                break 'rounds Stopped::Cancelled;
            }
            if !ok {
                break 'rounds Stopped::RunFailed { arm, status };
            }
        }
        rounds += 1;
        let elapsed = start.elapsed();
        let per_round = elapsed / rounds as u32;
        // Whether another round fits.
        let fits = |extra: usize| match (spec.budget, max_vms) {
            (_, Some(n)) => (rounds + extra) * 2 <= n,
            (Budget::Time(b), None) => elapsed + per_round * extra as u32 <= b,
            _ => true,
        };
        let last = !fits(1);
        if rounds < MIN_ROUNDS && !last {
            continue;
        }
        let seq = sequence.get_or_insert_with(|| {
            // The rounds the budget allows, fixed at the first look.
            let mut more = 0;
            while fits(more + 1) && more < 100_000 {
                more += 1;
            }
            Sequential::new(spec.gated.len(), rounds + more, spec.policy)
        });
        let l = seq.look(rounds, last, tests(&reports, spec, rounds));
        events.looked(&l, seq.max_rounds());
        let stop = l.stop;
        look = Some(l);
        match stop {
            Some(Stop::Decided) => break Stopped::Decided,
            Some(Stop::Budget) => break Stopped::Budget,
            None if last => break Stopped::Budget,
            None => {}
        }
    };
    Ok(Finding {
        rounds,
        reports,
        gated: spec.gated.clone(),
        look,
        max_rounds: sequence.as_ref().map_or(rounds, |s| s.max_rounds()),
        stopped,
        elapsed: start.elapsed(),
    })
}
