//! The `--junit FILE` sink: the expectations' verdicts as JUnit XML, in
//! the engine's one JUnit writer ([`ipivmm_analysis::expect::junit`]).
use super::sink::{Command, Kind, Sink};

/// The `--junit FILE` sink of `run` and `sweep`.
pub static SINK: Sink = Sink {
    flag: "junit",
    help: &[(
        &[Command::Run, Command::Sweep],
        "Write the expectations' verdicts as JUnit XML to FILE",
    )],
    kind: Kind::Verdicts(|v, suite, out| {
        let xml = v.junit(suite).map_err(std::io::Error::other)?;
        out.write_all(xml.as_bytes())
    }),
};
