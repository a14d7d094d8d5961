//! Every output format ([`Sink`]), in the order of their flags in `--help`,
//! of the checks and of the writes: a format is its own file plus its line
//! in [`ALL`]. The registry sits above the formats it lists; none of them
//! imports it back ([`super::dest`] and the command line read it).
use super::sink::{Command, Sink};
use std::path::PathBuf;

/// The registry.
pub static ALL: &[&Sink] = &[
    &super::json::SINK,
    &super::csv::SINK,
    &super::svg::SINK,
    &super::tap::SINK,
    &super::junit::SINK,
];

/// The flags of `command` of the results sinks (`verdicts` false) or of
/// the verdict sinks, added to `cmd` in the registry's order.
pub fn add_args(cmd: clap::Command, command: Command, verdicts: bool) -> clap::Command {
    ALL.iter()
        .filter(|s| s.is_verdicts() == verdicts)
        .filter_map(|s| Some((s, s.help_in(command)?)))
        .fold(cmd, |cmd, (s, help)| cmd.arg(s.arg(help)))
}

/// The outputs of these sinks that `m` holds: each sink given and the
/// path its flag named (none for a switch).
pub fn given(m: &clap::ArgMatches, verdicts: bool) -> Vec<(&'static Sink, Option<PathBuf>)> {
    ALL.iter()
        .filter(|s| s.is_verdicts() == verdicts)
        .filter_map(|s| match s.value_name() {
            Some(_) => match m.try_get_one::<PathBuf>(s.flag) {
                Ok(Some(p)) => Some((*s, Some(p.clone()))),
                _ => None,
            },
            None => match m.try_get_one::<bool>(s.flag) {
                Ok(Some(true)) => Some((*s, None)),
                _ => None,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::ALL;

    #[test]
    fn flags_are_unique_and_each_sink_is_offered_somewhere() {
        for (i, s) in ALL.iter().enumerate() {
            assert!(
                ALL[..i].iter().all(|o| o.flag != s.flag),
                "{} twice",
                s.long()
            );
            assert!(!s.help.is_empty(), "{} is offered nowhere", s.long());
            for (_, h) in s.help {
                assert!(!h.ends_with('.') && !h.contains('\n'), "{h}");
            }
        }
    }
}
