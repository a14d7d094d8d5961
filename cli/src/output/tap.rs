//! The `--tap` switch: the expectations' verdicts as TAP version 13, in
//! the engine's one TAP writer ([`ipivmm_analysis::expect::tap`], which the lab
//! reads back).
use super::sink::{Command, Kind, Sink};

/// The `--tap` switch of `run` and `sweep`.
pub static SINK: Sink = Sink {
    flag: "tap",
    help: &[(
        &[Command::Run, Command::Sweep],
        "Print the expectations' verdicts as TAP version 13 on stdout (tables go to stderr)",
    )],
    kind: Kind::VerdictsOnStdout(|v, suite, out| out.write_all(v.tap(suite).as_bytes())),
};
