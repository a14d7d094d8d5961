//! `--json`: the results model itself ([`ipivmm_analysis::results::Document`],
//! schema `ipivmm.results/1`), pretty-printed, streamed: a large document
//! is not held twice (model and text).
use super::sink::{Command, Docs, Kind, Sink};
use std::io::Write;

/// The `--json FILE` sink of `run`, `sweep` and `compare --run`.
pub static SINK: Sink = Sink {
    flag: "json",
    help: &[
        (
            &[Command::Run, Command::Sweep],
            "Write the results as JSON to FILE ('-' for stdout; tables then go to stderr)",
        ),
        (
            &[Command::Compare],
            "With --run: every run of both sides as JSON to FILE, journaled as each ends (compare reads it back)",
        ),
    ],
    kind: Kind::Results(write),
};

/// Each document of `docs` as pretty JSON, a newline after each.
fn write(docs: &dyn Docs, out: &mut dyn Write) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(out);
    docs.each(&mut |_, doc| {
        serde_json::to_writer_pretty(&mut w, doc)?;
        w.write_all(b"\n")
    })?;
    w.flush()
}
