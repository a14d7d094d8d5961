//! The levers' flags, one per row of `ipivmm_analysis::mode::lever_table`: the row
//! gives the flag, its value name and help, and reads its value, so a new
//! lever is a flag of `run`, `sweep` and `compare --run` without an edit
//! here.
use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use ipivmm_analysis::mode::lever_table::LeverRow;
use ipivmm_analysis::mode::Levers;

/// The levers the flags set (the others at their defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeverFlags(pub Levers);

impl Args for LeverFlags {
    fn augment_args(cmd: Command) -> Command {
        LeverRow::ALL.iter().fold(cmd, |cmd, row| cmd.arg(arg(row)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// The flag of `row`: a switch, or a value its lever reads (junk is
/// refused by clap with the lever's own message).
fn arg(row: &'static LeverRow) -> Arg {
    let arg = Arg::new(row.flag).long(row.flag).help(row.help);
    if row.switch {
        return arg.action(ArgAction::SetTrue);
    }
    let lever = row.lever;
    let read = move |s: &str| {
        let mut l = Levers::default();
        l.set_text(lever, s).map(|()| s.to_string())
    };
    arg.value_name(row.value_name).value_parser(read)
}

impl FromArgMatches for LeverFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = Self::default();
        flags.update_from_arg_matches(m)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        for row in LeverRow::ALL {
            let text = match row.switch {
                true => m.get_flag(row.flag).then(|| "yes".to_string()),
                false => m.get_one::<String>(row.flag).cloned(),
            };
            if let Some(text) = text {
                self.0.set_text(row.lever, &text).map_err(|e| {
                    clap::Error::raw(
                        clap::error::ErrorKind::ValueValidation,
                        format!("--{} {text}: {e}\n", row.flag),
                    )
                })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipivmm_analysis::mode::Lever;

    fn parse(argv: &[&str]) -> Result<Levers, clap::Error> {
        let cmd = LeverFlags::augment_args(Command::new("t").no_binary_name(true));
        let m = cmd.try_get_matches_from(argv)?;
        LeverFlags::from_arg_matches(&m).map(|f| f.0)
    }

    /// A value of each valued lever's flag that is not its default.
    fn value_of(l: Lever) -> &'static str {
        match l {
            Lever::Exits => "hlt,pause",
            Lever::Poll => "0",
            Lever::Pin => "0-1",
            _ => panic!("no example flag value for lever {l}: add one to value_of"),
        }
    }

    #[test]
    fn every_lever_has_a_flag_that_sets_it_and_only_it() {
        assert_eq!(parse(&[]).unwrap(), Levers::default());
        for row in LeverRow::ALL {
            let flag = format!("--{}", row.flag);
            let argv: Vec<&str> = match row.switch {
                true => vec![&flag],
                false => vec![&flag, value_of(row.lever)],
            };
            let l = parse(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            for other in LeverRow::ALL {
                assert_eq!(l.is_set(other.lever), other.lever == row.lever, "{argv:?}");
            }
            if !row.switch {
                let e = parse(&[&flag, "maybe"]).unwrap_err().to_string();
                assert!(e.contains("maybe"), "{flag} maybe: {e}");
            }
        }
    }
}
