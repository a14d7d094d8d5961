//! The one error type of the output writers and readers.

/// Errors of the output writers and readers.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A results file (or text) that cannot be used.
    #[error("{what}: {problem}")]
    BadInput {
        /// The file (or input) name.
        what: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Writing an output failed.
    #[error("writing {what}: {problem}")]
    Write {
        /// The output.
        what: String,
        /// Why.
        problem: String,
    },
    /// An in-memory report did not convert to the results model (a bug).
    #[error("results model: {0}")]
    Model(String),
    /// An I/O error of an output (or of reading a recorded document).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
