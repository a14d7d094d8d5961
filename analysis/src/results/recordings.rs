//! Recorded results files read as one body of evidence (a plan's
//! `results = GLOB`): what counts as a recording, decided once. A file
//! that a command did not finish (killed, or still running: it says
//! `incomplete`) is named, never judged as if whole or skipped unseen; a
//! file with no run is named too (its checks would have nothing to read);
//! the same run found twice (a copy, a link, a glob that matched both) is
//! refused, since counted twice it would pass for two recordings; and the
//! files a glob loads are bounded in bytes all together.
use super::{fingerprint, Document};
use crate::Error;
use std::path::{Path, PathBuf};

/// The most bytes of results files one set of recordings may load: four
/// results files at their largest ([`super::MAX_RESULTS_FILE`]).
pub(crate) const MAX_RECORDINGS_BYTES: u64 = 4 * super::MAX_RESULTS_FILE;

/// `files` as one document: every run of every file, in order, and every
/// skipped combination; Err for the first file or run that is not a
/// recording of its own.
pub(crate) fn merge(files: &[PathBuf], max_bytes: u64) -> Result<Document, Error> {
    let bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .fold(0u64, u64::saturating_add);
    if bytes > max_bytes {
        return Err(Error::TooLarge {
            bytes,
            max: max_bytes,
        });
    }
    let mut docs = Vec::with_capacity(files.len());
    for f in files {
        let doc = Document::load(f)?;
        doc.check_whole(f)?;
        docs.push(doc);
    }
    let runs = files.iter().zip(&docs).flat_map(|(f, d)| {
        d.runs
            .iter()
            .enumerate()
            .map(move |(i, r)| (fingerprint::of(r), format!("{} run {}", f.display(), i + 1)))
    });
    if let Some((first, second)) = fingerprint::first_twice(runs) {
        return Err(Error::SameRecordingTwice { first, second });
    }
    let mut merged: Option<Document> = None;
    for doc in docs {
        match &mut merged {
            Some(m) => {
                m.runs.extend(doc.runs);
                m.skipped.extend(doc.skipped);
            }
            None => merged = Some(doc),
        }
    }
    Ok(merged.unwrap_or_else(|| Document::new(Vec::new(), Vec::new())))
}

impl Document {
    /// Whether this document, read from `file`, is a whole recording.
    pub fn check_whole(&self, file: &Path) -> Result<(), Error> {
        let file = file.display().to_string();
        if let Some(why) = &self.incomplete {
            return Err(Error::Incomplete {
                file,
                why: why.clone(),
            });
        }
        if self.runs.is_empty() && self.skipped.is_empty() {
            return Err(Error::Empty { file });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("ipivmm-recordings-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    fn fixture() -> String {
        include_str!("../../tests/fixtures/run-pingpong-2026-12-01.json").to_string()
    }

    fn err(files: &[PathBuf]) -> String {
        merge(files, MAX_RECORDINGS_BYTES)
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn a_copy_a_killed_file_and_an_empty_one_are_named() {
        let d = dir("cases");
        let a = d.join("a.json");
        std::fs::write(&a, fixture()).expect("write");
        let doc = merge(std::slice::from_ref(&a), MAX_RECORDINGS_BYTES).expect("one file");
        assert!(!doc.runs.is_empty());
        // A copy: the same runs twice.
        let copy = d.join("copy.json");
        std::fs::copy(&a, &copy).expect("copy");
        let e = err(&[a.clone(), copy.clone()]);
        assert!(
            e.contains("same run") && e.contains("copy.json run 1"),
            "{e}"
        );
        // A journal killed before its first run.
        let mut killed = Document::new(Vec::new(), Vec::new());
        killed.incomplete = Some("run in progress (or killed): no run planned yet".into());
        let k = d.join("killed.json");
        std::fs::write(&k, serde_json::to_string(&killed).expect("json")).expect("write");
        let e = err(&[a.clone(), k]);
        assert!(e.contains("killed.json: not a whole recording"), "{e}");
        // A document with no run.
        let empty = d.join("empty.json");
        let none = Document::new(Vec::new(), Vec::new());
        std::fs::write(&empty, serde_json::to_string(&none).expect("json")).expect("write");
        let e = err(&[a.clone(), empty]);
        assert!(e.contains("empty.json: no run recorded"), "{e}");
        // Over the byte bound.
        let e = merge(&[a], 10).expect_err("too large").to_string();
        assert!(e.contains("over the 10"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// One reading of "a recording" on every surface (issue 47): for any set of
/// files — whole, killed (`incomplete`), empty, or copies of one another —
/// a plan over recorded files ([`merge`]) refuses exactly the sets that
/// `compare` refuses (the same run twice: [`crate::compare::Comparison::of_recorded`];
/// a file that is not whole: [`check_one`], which `compare
/// --fail-on-regression` applies to each file it reads).
#[cfg(test)]
mod agreement {
    use super::*;
    use crate::compare::{Comparison, Dimension, Recorded};
    use proptest::prelude::*;

    /// What file `i` of a set is.
    #[derive(Clone, Debug)]
    enum Kind {
        Whole,
        Killed,
        Empty,
        CopyOf(usize),
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            4 => Just(Kind::Whole),
            1 => Just(Kind::Killed),
            1 => Just(Kind::Empty),
            2 => (0usize..4).prop_map(Kind::CopyOf),
        ]
    }

    fn base() -> Document {
        serde_json::from_str(include_str!(
            "../../tests/fixtures/run-pingpong-2026-12-01.json"
        ))
        .expect("fixture parses")
    }

    /// File `i`: the fixture's runs made its own (a nanosecond apart).
    fn whole(i: usize) -> Document {
        let mut d = base();
        for r in &mut d.runs {
            r.timings.total_ns += 1_000 * (i as u64 + 1);
        }
        d
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn plans_and_compare_refuse_the_same_sets(kinds in proptest::collection::vec(kind(), 2..5)) {
            let dir = std::env::temp_dir().join(format!(
                "ipivmm-agreement-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("temp dir");
            let mut docs: Vec<Document> = Vec::new();
            // Whether some file is a copy of an earlier one that has runs.
            let mut copies = false;
            for (i, k) in kinds.iter().enumerate() {
                let d = match k {
                    Kind::Whole => whole(i),
                    Kind::Killed => Document {
                        incomplete: Some("run in progress (or killed): 1 of 5 planned runs finished".into()),
                        ..whole(i)
                    },
                    Kind::Empty => Document::new(Vec::new(), Vec::new()),
                    Kind::CopyOf(j) if *j < i => {
                        copies |= !docs[*j].runs.is_empty();
                        docs[*j].clone()
                    }
                    Kind::CopyOf(_) => whole(i),
                };
                docs.push(d);
            }
            let files: Vec<PathBuf> = docs
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let p = dir.join(format!("r{i}.json"));
                    std::fs::write(&p, d.to_json()).expect("write");
                    p
                })
                .collect();
            // Read back as every surface reads them.
            let read: Vec<Document> = files.iter().map(|f| Document::load(f).expect("loads")).collect();
            let plan_refuses = merge(&files, MAX_RECORDINGS_BYTES).is_err();
            let not_whole = files.iter().zip(&read).any(|(f, d)| d.check_whole(f).is_err());
            let recorded: Vec<(String, Recorded)> = files
                .iter()
                .zip(&read)
                .map(|(f, d)| (f.display().to_string(), Recorded::of(d)))
                .collect();
            let same_run_twice = matches!(
                Comparison::of_recorded(&recorded, Dimension::File, &[]),
                Err(Error::SameRunTwice { .. })
            );
            let _ = std::fs::remove_dir_all(&dir);
            prop_assert_eq!(plan_refuses, not_whole || same_run_twice, "{:?}", kinds);
            // A copy of a file with runs is always caught, whatever else.
            if copies {
                prop_assert!(plan_refuses, "{:?}", kinds);
            }
        }
    }
}
