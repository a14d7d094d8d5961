//! A host noise profile (`ipivmm calibrate`): how much one configuration's
//! headline spreads on this host within a recording (between its
//! repeats), between recordings (the drift of files recorded apart), and
//! between the two runs of an interleaved round; and how the gate did on
//! this host against two controls: an A/A comparison (nothing changed:
//! every exit 1 is a false alarm) and an injected delay (a known
//! regression: every exit 1 a detection). The gate adds the drift to a
//! comparison of one baseline file (`compare --noise-profile`) and
//! reports the measured rates beside its verdict.
//!
//! A profile says where and when it was measured (host name, CPU model,
//! kernel, KVM module parameters, configuration, ipivmm version, date);
//! [`NoiseProfile::matches`] lists what differs from the files it is
//! applied to (a field an older profile lacks is unknown: a mismatch).
//! Its drift is the 80% upper confidence bound of the between-recordings
//! spread (χ² on the recordings' degrees of freedom), so that a profile of
//! few recordings does not understate it; a drift no host plausibly shows
//! ([`NoiseProfile::MAX_DRIFT`]) is refused.
use crate::results::identity::ConfigId;
use crate::results::Document;
use serde::{Deserialize, Serialize};
use statrs::distribution::{ChiSquared, ContinuousCDF};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// The one-sided confidence of the drift's upper bound.
pub(crate) const DRIFT_CONFIDENCE: f64 = 0.80;

/// How far apart (seconds) a profile and a file may be recorded and
/// still be taken as the same host state: 30 days.
pub(crate) const MAX_AGE_SECONDS: u64 = 30 * 24 * 3600;

/// How the gate did on one kind of control.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Control {
    /// Comparisons made.
    pub comparisons: usize,
    /// Of those, exit 0 (pass).
    pub passed: usize,
    /// Exit 1 (regressed or failed).
    pub failed: usize,
    /// Exit 4 (undecided).
    pub undecided: usize,
    /// The change injected (0.2 = the delay was 20% of the p50), for the
    /// injected control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected: Option<f64>,
}

impl Control {
    /// Counts one comparison's exit status.
    pub fn count(&mut self, exit: u8) {
        self.comparisons += 1;
        match exit {
            0 => self.passed += 1,
            1 => self.failed += 1,
            _ => self.undecided += 1,
        }
    }
}

/// A host's noise profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NoiseProfile {
    /// [`NoiseProfile::SCHEMA`].
    pub schema: String,
    /// The ipivmm that measured it.
    pub ipivmm_version: String,
    /// When (Unix seconds).
    pub recorded_at: u64,
    /// The host, in one line.
    pub host: String,
    /// The configuration measured.
    pub config: ConfigId,
    /// Recordings made (blocks of repeats, apart in time).
    pub recordings: usize,
    /// Repeats per recording.
    pub repeats: usize,
    /// Log sd of the headline p50 between the repeats of a recording.
    pub within_log_sd: f64,
    /// Log sd of a recording's median that is not explained by its
    /// repeats' spread: the drift between recordings.
    pub between_log_sd: f64,
    /// Log sd of the difference of the two runs of an interleaved round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_log_sd: Option<f64>,
    /// The A/A control: every pair of recordings compared as one file
    /// against another with no profile, by `compare`'s rule for files
    /// ([`crate::gate::Evidence::recorded`]): one recording a side
    /// and no known drift leaves a latency figure undecided.
    pub aa: Control,
    /// The same with the measured drift added (`--noise-profile`).
    pub aa_with_drift: Control,
    /// The injected-delay control: each recording against the injected one.
    pub injected: Control,
    /// The same with the measured drift added.
    pub injected_with_drift: Control,
    /// The A/A control with several baseline recordings (`compare
    /// --baseline` of all the others, whose spread measures the drift) against
    /// each recording in turn; None with fewer than 3 recordings, and in
    /// older profiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aa_recordings: Option<Control>,
    /// Every plain recording as the baseline against the injected one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected_recordings: Option<Control>,
    /// Each recording's median p50, the injected one last.
    pub recording_medians: Vec<f64>,
    /// The host's name (`uname -n`); None in older profiles (unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The CPU model; None in older profiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    /// `uname -r`; None in older profiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_release: Option<String>,
    /// KVM module parameters (`module -> parameter -> value`); None in
    /// older profiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_params: Option<BTreeMap<String, BTreeMap<String, String>>>,
    /// The point estimate of the drift (log sd); `between_log_sd` is its
    /// upper bound, what the gate uses. None in older profiles, whose
    /// `between_log_sd` was the estimate (raised to the bound on load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between_log_sd_estimate: Option<f64>,
    /// The drift's degrees of freedom (recordings − 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between_df: Option<usize>,
    /// The pause between recordings (seconds): 0 is back to back, which
    /// understates the drift of files recorded apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_seconds: Option<f64>,
}

/// One way a profile differs from a file it is applied to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// The file.
    pub file: String,
    /// What differs (host, CPU model, kernel, KVM parameter, configuration,
    /// ipivmm version, date).
    pub what: String,
    /// The profile's value ("unknown" where an older profile lacks it).
    pub profile: String,
    /// The file's.
    pub found: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} {}, the noise profile's {}",
            self.file, self.what, self.found, self.profile
        )
    }
}

const UNKNOWN: &str = "unknown";

fn param<'a>(
    x: &'a BTreeMap<String, BTreeMap<String, String>>,
    m: &str,
    p: &str,
) -> Option<&'a str> {
    x.get(m).and_then(|ps| ps.get(p)).map(String::as_str)
}

fn known(v: Option<&str>) -> String {
    v.map_or_else(|| UNKNOWN.to_string(), str::to_string)
}

impl NoiseProfile {
    /// The schema name of a profile.
    pub const SCHEMA: &'static str = "ipivmm.noise-profile/1";

    /// The largest drift between recordings (log sd) a profile may claim:
    /// ×1.65 from one recording to the next is a broken host or a broken
    /// measurement, not a drift to divide verdicts by.
    pub const MAX_DRIFT: f64 = 0.5;

    /// The drift between recordings with its uncertainty: the 80%
    /// upper bound of the sd of recording means (χ², `df` degrees of
    /// freedom: recordings − 1) less what their repeats' own spread
    /// (`within`, `repeats` a recording) explains. Without degrees of
    /// freedom the point estimate is all there is.
    pub fn drift_upper_bound(means_sd: f64, df: usize, within: f64, repeats: usize) -> f64 {
        let var = means_sd * means_sd;
        let upper = match ChiSquared::new(df as f64) {
            Ok(chi) if df > 0 => var * df as f64 / chi.inverse_cdf(1.0 - DRIFT_CONFIDENCE),
            _ => var,
        };
        (upper - within * within / repeats.max(1) as f64)
            .max(0.0)
            .sqrt()
    }

    /// Reads a profile; one line naming the file on error.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = crate::inputs::read_text(path, 1 << 20)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let p: NoiseProfile = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{}: not a noise profile ({e}); write one with `ipivmm calibrate --output FILE`",
                path.display()
            )
        })?;
        if p.schema != Self::SCHEMA {
            return Err(format!(
                "{}: schema {} is not {}; measure it again with this ipivmm (`ipivmm calibrate`)",
                path.display(),
                p.schema,
                Self::SCHEMA
            ));
        }
        if !(p.between_log_sd.is_finite() && p.between_log_sd >= 0.0) {
            return Err(format!(
                "{}: between_log_sd is not a spread",
                path.display()
            ));
        }
        p.settle().map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Checks a profile as read and brings an older one to this
    /// version's meaning: its drift raised to the upper bound.
    pub fn settle(mut self) -> Result<Self, String> {
        let spreads = [
            ("within_log_sd", Some(self.within_log_sd)),
            ("between_log_sd", Some(self.between_log_sd)),
            ("between_log_sd_estimate", self.between_log_sd_estimate),
        ];
        for (name, v) in spreads {
            if v.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                return Err(format!("{name} is not a spread"));
            }
        }
        let estimate = self.between_log_sd_estimate.unwrap_or(self.between_log_sd);
        if estimate > Self::MAX_DRIFT {
            return Err(format!(
                "a drift between recordings of log sd {estimate:.3} (×{:.2} from one recording to the next) is \
                 more than a host plausibly shows (at most {}): the recordings were disturbed or failed; \
                 measure again with `ipivmm calibrate` on a quiet host",
                estimate.exp(),
                Self::MAX_DRIFT
            ));
        }
        // The bound of the estimate (at least what calibrate computed: an
        // estimate of 0 hides how far below the repeats' noise the
        // recordings' means were).
        let df = self.between_df.unwrap_or(self.recordings.saturating_sub(1));
        let within_mean = self.within_log_sd * self.within_log_sd / self.repeats.max(1) as f64;
        let means_sd = (estimate * estimate + within_mean).sqrt();
        let bound = NoiseProfile::drift_upper_bound(means_sd, df, self.within_log_sd, self.repeats);
        if self.between_df.is_none() {
            // An older profile: its drift is the point estimate of
            // `recordings` recordings; take the bound this version uses.
            self.between_log_sd_estimate = Some(estimate);
            self.between_log_sd = bound;
            self.between_df = Some(df);
        } else if self.between_log_sd > bound * (1.0 + 1e-6) + 1e-12 {
            return Err(format!(
                "between_log_sd {:.3} is above the {:.0}% bound ({bound:.3}) of its estimate {estimate:.3}: the \
                 profile was edited; measure again with `ipivmm calibrate`",
                self.between_log_sd,
                DRIFT_CONFIDENCE * 100.0
            ));
        }
        Ok(self)
    }

    /// What differs between this profile and each of `files` (name,
    /// document): host name, CPU model, kernel, KVM module parameters,
    /// whether the file has the profiled configuration, ipivmm version,
    /// and dates more than 30 days apart. A field either side lacks is
    /// unknown, and said. Each one line (`a.json: kernel 6.8.0, the noise
    /// profile's 6.1.0`); empty: the profile matches.
    pub fn matches(&self, files: &[(&str, &Document)]) -> Vec<String> {
        self.mismatches(files)
            .iter()
            .map(Mismatch::to_string)
            .collect()
    }

    /// [`NoiseProfile::matches`], each difference by its parts.
    pub(crate) fn mismatches(&self, files: &[(&str, &Document)]) -> Vec<Mismatch> {
        let mut out = Vec::new();
        for (name, d) in files {
            let mut differ = |what: &str, profile: String, found: String| {
                if profile == UNKNOWN || found == UNKNOWN || profile != found {
                    out.push(Mismatch {
                        file: name.to_string(),
                        what: what.to_string(),
                        profile,
                        found,
                    });
                }
            };
            let h = d.host.as_ref();
            differ(
                "host",
                known(self.hostname.as_deref()),
                known(h.and_then(|h| h.hostname.as_deref())),
            );
            differ(
                "CPU",
                known(self.cpu_model.as_deref()),
                known(h.map(|h| h.cpu_model.as_str())),
            );
            differ(
                "kernel",
                known(self.kernel_release.as_deref()),
                known(h.map(|h| h.kernel_release.as_str())),
            );
            match (&self.kvm_params, h.map(|h| &h.params)) {
                (Some(mine), Some(theirs)) => {
                    let keys: std::collections::BTreeSet<(&String, &String)> = mine
                        .iter()
                        .chain(theirs.iter())
                        .flat_map(|(m, ps)| ps.keys().map(move |p| (m, p)))
                        .collect();
                    for (m, p) in keys {
                        let (a, b) = (param(mine, m, p), param(theirs, m, p));
                        if a != b {
                            differ(&format!("KVM parameter {m}.{p}"), known(a), known(b));
                        }
                    }
                }
                (a, b) => {
                    if a.is_none() || b.is_none() {
                        differ(
                            "KVM parameters",
                            if a.is_some() { "recorded" } else { UNKNOWN }.into(),
                            if b.is_some() { "recorded" } else { UNKNOWN }.into(),
                        );
                    }
                }
            }
            if !d.runs.iter().any(|r| r.id() == self.config) {
                let first = d.runs.first().map_or_else(
                    || "no run".to_string(),
                    |r| {
                        let others = d
                            .runs
                            .iter()
                            .map(|r| r.id())
                            .collect::<std::collections::BTreeSet<_>>();
                        format!(
                            "{}{}",
                            r.id(),
                            if others.len() > 1 {
                                format!(" and {} other configurations", others.len() - 1)
                            } else {
                                String::new()
                            }
                        )
                    },
                );
                differ("configuration", self.config.to_string(), first);
            }
            differ(
                "ipivmm version",
                self.ipivmm_version.clone(),
                d.ipivmm_version.clone(),
            );
            let date = |t: u64| {
                if t == 0 {
                    UNKNOWN.to_string()
                } else {
                    format!("recorded at {t} (Unix seconds)")
                }
            };
            match d.recorded_at {
                Some(t)
                    if self.recorded_at != 0 && t.abs_diff(self.recorded_at) <= MAX_AGE_SECONDS => {
                }
                t => differ(
                    "date (more than 30 days apart, or unknown)",
                    date(self.recorded_at),
                    t.map_or_else(|| UNKNOWN.to_string(), date),
                ),
            }
        }
        out
    }

    /// One line for a report: the spreads and the controls' rates (with
    /// the drift added, as `--noise-profile` judges).
    pub fn line(&self) -> String {
        let pause = match self.pause_seconds {
            Some(p) if p > 0.0 => String::new(),
            Some(_) => {
                " (recorded back to back: drift between files recorded apart may be larger)".into()
            }
            None => " (pause between recordings unknown)".into(),
        };
        format!(
            "noise profile of {}: log sd {:.3} within a recording, {:.3} between recordings ({:.0}% upper bound{}{pause}); \
             with that drift, A/A: {} of {} passed, {} false alarms; +{:.0}% injected: {} of {} caught",
            self.host,
            self.within_log_sd,
            self.between_log_sd,
            DRIFT_CONFIDENCE * 100.0,
            self.between_log_sd_estimate
                .map_or(String::new(), |e| format!(" of the estimate {e:.3}")),
            self.aa_with_drift.passed,
            self.aa_with_drift.comparisons,
            self.aa_with_drift.failed,
            self.injected_with_drift.injected.unwrap_or(0.0) * 100.0,
            self.injected_with_drift.failed,
            self.injected_with_drift.comparisons
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::ApicvRequest;
    use crate::results::{RunConfig, RunReport};

    /// A profile as this version writes it, of the host and configuration
    /// of `doc`.
    fn profile_of(doc: &Document) -> NoiseProfile {
        let h = doc.host.clone().expect("a host");
        NoiseProfile {
            schema: NoiseProfile::SCHEMA.into(),
            ipivmm_version: doc.ipivmm_version.clone(),
            recorded_at: doc.recorded_at.unwrap_or(0),
            host: "a host".into(),
            config: doc.runs[0].id(),
            recordings: 4,
            repeats: 5,
            within_log_sd: 0.1,
            between_log_sd: 0.08,
            round_log_sd: None,
            aa: Control::default(),
            aa_with_drift: Control::default(),
            injected: Control::default(),
            injected_with_drift: Control::default(),
            aa_recordings: None,
            injected_recordings: None,
            recording_medians: vec![],
            hostname: h.hostname.clone(),
            cpu_model: Some(h.cpu_model.clone()),
            kernel_release: Some(h.kernel_release.clone()),
            kvm_params: Some(h.params.clone()),
            between_log_sd_estimate: Some(0.05),
            between_df: Some(3),
            pause_seconds: Some(10.0),
        }
    }

    fn doc() -> Document {
        let mut run = RunReport::not_started(RunConfig::default(), ApicvRequest::Host, "fixture");
        run.host = Some(ipivmm_host::facts::HostInfo {
            hostname: Some("runner-1".into()),
            ..ipivmm_host::facts::HostInfo::synthetic(
                ipivmm_host::facts::KvmBackend::KvmIntel,
                true,
            )
        });
        Document::new(vec![run], Vec::new())
    }

    #[test]
    fn a_matching_profile_matches_and_each_difference_is_said() {
        let d = doc();
        let p = profile_of(&d);
        assert_eq!(p.mismatches(&[("a.json", &d)]), vec![]);
        let mut other = p.clone();
        other.hostname = Some("laptop".into());
        other.kernel_release = Some("4.19".into());
        other.ipivmm_version = "0.0.1".into();
        other.recorded_at = 1;
        other.config = RunReport::not_started(
            RunConfig {
                vcpus: 7,
                ..RunConfig::default()
            },
            ApicvRequest::Host,
            "x",
        )
        .id();
        let mut params = p.kvm_params.clone().unwrap();
        params
            .entry("kvm_intel".into())
            .or_default()
            .insert("enable_apicv".into(), "N".into());
        other.kvm_params = Some(params);
        let m = other.mismatches(&[("a.json", &d)]);
        let what: Vec<&str> = m.iter().map(|m| m.what.as_str()).collect();
        for w in ["host", "kernel", "ipivmm version", "configuration"] {
            assert!(what.contains(&w), "{w} in {what:?}");
        }
        assert!(what.iter().any(|w| w.starts_with("date")), "{what:?}");
        assert!(what.iter().any(|w| w.contains("enable_apicv")), "{what:?}");
        assert!(
            m[0].to_string()
                .starts_with("a.json: host runner-1, the noise profile's laptop"),
            "{}",
            m[0]
        );
    }

    #[test]
    fn an_older_profile_reads_with_unknowns_said_and_its_drift_raised() {
        let d = doc();
        let mut v = serde_json::to_value(profile_of(&d)).unwrap();
        let o = v.as_object_mut().unwrap();
        for k in [
            "hostname",
            "cpu_model",
            "kernel_release",
            "kvm_params",
            "between_log_sd_estimate",
            "between_df",
            "pause_seconds",
        ] {
            o.remove(k);
        }
        o.insert("between_log_sd".into(), 0.05.into());
        let old: NoiseProfile = serde_json::from_value(v).unwrap();
        let p = old.settle().unwrap();
        // Four recordings: the 80% bound is well above the estimate.
        assert_eq!(p.between_log_sd_estimate, Some(0.05));
        assert_eq!(p.between_df, Some(3));
        assert!(p.between_log_sd > 0.07, "{}", p.between_log_sd);
        let what: Vec<String> = p
            .mismatches(&[("a.json", &d)])
            .into_iter()
            .map(|m| m.what)
            .collect();
        for w in ["host", "CPU", "kernel", "KVM parameters"] {
            assert!(what.iter().any(|x| x == w), "{w} in {what:?}");
        }
    }

    #[test]
    fn an_implausible_drift_is_refused() {
        let mut p = profile_of(&doc());
        p.between_log_sd_estimate = Some(5.0);
        let e = p.clone().settle().unwrap_err();
        assert!(e.contains("more than a host plausibly shows"), "{e}");
        p.between_log_sd_estimate = Some(f64::NAN);
        assert!(p.clone().settle().is_err());
        // A bound edited past its estimate's (×148 claimed, 0.05 measured).
        p.between_log_sd_estimate = Some(0.05);
        p.between_log_sd = 148f64.ln();
        let e = p.clone().settle().unwrap_err();
        assert!(e.contains("the profile was edited"), "{e}");
        // As calibrate writes it, it reads back unchanged.
        let mut q = profile_of(&doc());
        q.between_log_sd = NoiseProfile::drift_upper_bound(
            (0.05f64.powi(2) + 0.1f64.powi(2) / 5.0).sqrt(),
            3,
            0.1,
            5,
        );
        assert_eq!(q.clone().settle().unwrap(), q);
    }

    #[test]
    fn the_drift_bound_grows_as_recordings_shrink() {
        // The same spread of recording means, known from 2 and from 40
        // recordings: the bound of 2 is far above; 40 close to it.
        let few = NoiseProfile::drift_upper_bound(0.05, 1, 0.0, 5);
        let many = NoiseProfile::drift_upper_bound(0.05, 39, 0.0, 5);
        assert!(few > 0.15, "{few}");
        assert!(many > 0.05 && many < 0.06, "{many}");
        // What the repeats' own spread explains is taken out.
        assert_eq!(NoiseProfile::drift_upper_bound(0.01, 39, 0.2, 5), 0.0);
    }
}
