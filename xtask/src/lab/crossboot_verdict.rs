//! The crossboot pass's checks, one boot ([`Side`]) at a time: kvm_amd
//! loaded as the side asks, and its recordings, each a whole results file
//! (`cargo xtask lab crossboot` runs the boots and the judgements).
use super::host::files;
use super::report::{Report, Side};
use std::fs;
use std::path::Path;

/// Recordings per boot (kernel-gate.sh's RECORDINGS).
pub const RECORDINGS: usize = 3;

impl Side {
    /// What kvm_amd reads back (module-params.txt).
    pub(super) fn param(self) -> &'static str {
        match self {
            Side::Base => "kvm_amd.avic=Y",
            Side::Changed => "kvm_amd.avic=N",
        }
    }
}

/// A boot's checks beyond the lab's own: kvm_amd loaded as its side asks,
/// and the recordings there, each a whole results file.
pub fn verdict(r: &mut Report, side: Side, dir: &Path) {
    let params = fs::read_to_string(dir.join("module-params.txt")).unwrap_or_default();
    if params.lines().any(|l| l == side.param()) {
        r.ok(format!("side {}: {}", side.name(), side.param()));
    } else {
        let seen = params
            .lines()
            .filter(|l| l.starts_with("kvm_amd.avic"))
            .map(str::to_string)
            .collect();
        r.bad(format!("side {}: {}", side.name(), side.param()), seen);
    }
    let recs = files(&dir.join("recordings"), "", ".json");
    let unreadable: Vec<String> = recs
        .iter()
        .filter_map(|f| {
            ipivmm_analysis::results::Document::load(f)
                .err()
                .map(|e| format!("{}: {e}", f.display()))
        })
        .collect();
    let mut offences = unreadable;
    if recs.len() != RECORDINGS {
        offences.push(format!(
            "{} recordings in {}",
            recs.len(),
            dir.join("recordings").display()
        ));
    }
    r.check(
        &format!("{RECORDINGS} recordings, each a results file"),
        offences,
    );
}
