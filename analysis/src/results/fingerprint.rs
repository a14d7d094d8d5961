//! A run's identity by content: what it measured (each vCPU's phases and
//! counters) and when its clocks said it ran, hashed. Two different runs
//! never agree on all of it (their timings are nanoseconds apart, their
//! counters rarely equal); a file copied, linked or given twice under
//! two paths gives the same fingerprints, whatever its name. The gate
//! counts a recording once by this ([`crate::compare`], plans over
//! recorded files).
use super::RunReport;
use std::hash::{Hash, Hasher};

/// The fingerprint of `run`: its timings and vCPU results as the results
/// file writes them (the repeat index, host load and labels left out, so
/// that an edited copy of a run is still that run).
pub fn of(run: &RunReport) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    // Serialization of plain data does not fail; an error would hash as
    // its empty prefix, which no real run shares.
    let timings = serde_json::to_vec(&run.timings).unwrap_or_default();
    let vcpus = serde_json::to_vec(&run.vcpus).unwrap_or_default();
    timings.hash(&mut h);
    vcpus.hash(&mut h);
    h.finish()
}

/// The first run found twice among `runs` (each a fingerprint and where
/// it was found): where first, where again. The one check every surface
/// that reads recordings makes ([`crate::compare`], plans over files).
pub(crate) fn first_twice(
    runs: impl IntoIterator<Item = (u64, String)>,
) -> Option<(String, String)> {
    let mut seen = std::collections::HashMap::new();
    for (fp, here) in runs {
        if let Some(first) = seen.insert(fp, here.clone()) {
            return Some((first, here));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Document;

    fn sample() -> RunReport {
        let doc: Document = serde_json::from_str(include_str!(
            "../../tests/fixtures/run-pingpong-2026-12-01.json"
        ))
        .expect("fixture parses");
        doc.runs.into_iter().next().expect("a run")
    }

    #[test]
    fn a_copy_is_the_same_run_and_another_run_is_not() {
        let a = sample();
        let mut copy = a.clone();
        copy.repeat = Some(7);
        copy.host_load = None;
        assert_eq!(of(&a), of(&copy), "relabelled copy");
        let mut other = a.clone();
        other.timings.total_ns += 1;
        assert_ne!(of(&a), of(&other), "one nanosecond apart");
    }
}
