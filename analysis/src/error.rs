//! The crate's one error: a results file that cannot be read, recordings
//! that cannot be judged, documents that cannot be compared. One line each,
//! naming the fix.
use crate::compare::Dimension;

/// Why a results file, a set of recordings or a comparison cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A results document that cannot be read, naming the input.
    #[error("{what}: {problem}")]
    Unreadable {
        /// The file (or input) name.
        what: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A command that did not finish wrote it.
    #[error("{file}: not a whole recording: {why}; record it again (or remove it from the set)")]
    Incomplete {
        /// The file.
        file: String,
        /// Its `incomplete`.
        why: String,
    },
    /// It holds no run (and no skipped combination).
    #[error("{file}: no run recorded: nothing of it can be checked; record it again (or remove it from the set)")]
    Empty {
        /// The file.
        file: String,
    },
    /// One run found twice in a set of recordings.
    #[error("{first} and {second} are the same run (a copy, a link, or a file matched twice): a recording counts once; keep one")]
    SameRecordingTwice {
        /// Where first (file and run number).
        first: String,
        /// Where again.
        second: String,
    },
    /// Too much to load.
    #[error("the files hold {bytes} bytes, over the {max} a set of recordings may load: name fewer files (a narrower glob)")]
    TooLarge {
        /// Their size.
        bytes: u64,
        /// The bound.
        max: u64,
    },
    /// A baseline that names no column.
    #[error("--baseline {wanted}: no {by} of that name; the {by} values are: {}", .values.join(", "))]
    NoSuchBaseline {
        /// What was asked.
        wanted: String,
        /// The dimension.
        by: Dimension,
        /// What there is.
        values: Vec<String>,
    },
    /// Several baselines along a dimension that is not the file.
    #[error("several --baseline values with --by {0}: only files (--by file) can form a baseline of several recordings")]
    SeveralBaselines(Dimension),
    /// Every file is a baseline.
    #[error("every file is a --baseline: give at least one file to compare against them")]
    NothingButBaselines,
    /// One run given twice to compare (same content, whatever the paths).
    #[error("{first} and {second} are the same run (the same file given twice, a copy or a link): a recording counts once; give each file once")]
    SameRunTwice {
        /// Where it was first found (file and run number).
        first: String,
        /// Where again.
        second: String,
    },
    /// Two runs of one configuration with the same repeat index: one run
    /// counted twice would pass for independent repeats.
    #[error("{file}: runs {first} and {second} are both repeat {index} of {id}: a run written twice is not two repeats; record it again")]
    DuplicateRepeat {
        /// The file.
        file: String,
        /// The configuration.
        id: String,
        /// The repeat index (1-based).
        index: u32,
        /// The two runs (1-based positions in `runs[]`).
        first: usize,
        /// The second.
        second: usize,
    },
}

impl Error {
    /// Whether it refuses the inputs as given (the same run twice, too many
    /// bytes, a file that does not load): the command cannot start, exit 2,
    /// on every surface; otherwise (a file not whole) it is a failing point.
    pub fn refuses_inputs(&self) -> bool {
        matches!(
            self,
            Error::SameRecordingTwice { .. } | Error::TooLarge { .. } | Error::Unreadable { .. }
        )
    }
}
