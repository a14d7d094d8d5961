//! A host noise profile (`ipivmm calibrate`): how much one configuration's
//! headline spreads on this host within a recording (between its
//! repeats), between recordings (the drift of files recorded apart), and
//! between the two runs of an interleaved round; and how the gate did on
//! this host against two controls: an A/A comparison (nothing changed:
//! every exit 1 is a false alarm) and an injected delay (a known
//! regression: every exit 1 a detection). The gate adds the drift to a
//! comparison of one baseline file (`compare --noise-profile`) and
//! reports the measured rates beside its verdict.
use crate::results::identity::ConfigId;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The schema name of a profile.
pub const SCHEMA: &str = "ipivmm.noise-profile/1";

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
    /// [`SCHEMA`].
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
    /// against another (no drift assumed).
    pub aa: Control,
    /// The same with the measured drift added (`--noise-profile`).
    pub aa_with_drift: Control,
    /// The injected-delay control: each recording against the injected one.
    pub injected: Control,
    /// The same with the measured drift added.
    pub injected_with_drift: Control,
    /// Each recording's median p50, the injected one last.
    pub recording_medians: Vec<f64>,
}

impl NoiseProfile {
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
        if p.schema != SCHEMA {
            return Err(format!(
                "{}: schema {} is not {SCHEMA}; measure it again with this ipivmm (`ipivmm calibrate`)",
                path.display(),
                p.schema
            ));
        }
        if !(p.between_log_sd.is_finite() && p.between_log_sd >= 0.0) {
            return Err(format!(
                "{}: between_log_sd is not a spread",
                path.display()
            ));
        }
        Ok(p)
    }

    /// One line for a report: the spreads and the controls' rates (with
    /// the drift added, as `--noise-profile` judges).
    pub fn line(&self) -> String {
        format!(
            "noise profile of {}: log sd {:.3} within a recording, {:.3} between recordings; with that drift, \
             A/A: {} of {} passed, {} false alarms; +{:.0}% injected: {} of {} caught",
            self.host,
            self.within_log_sd,
            self.between_log_sd,
            self.aa_with_drift.passed,
            self.aa_with_drift.comparisons,
            self.aa_with_drift.failed,
            self.injected_with_drift.injected.unwrap_or(0.0) * 100.0,
            self.injected_with_drift.failed,
            self.injected_with_drift.comparisons
        )
    }
}
