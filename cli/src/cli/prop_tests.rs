//! Property tests of the command line (`ipivmm run` as clap parses it, then
//! `RunArgs::to_config` and `VmConfig::validate`): no input may panic, and
//! numbers parse exactly when they are numbers in range.
//!
//! Cases per property: 256, or `IPIVMM_PROPTEST_CASES` for long campaigns.
use super::args::{Cli, Command, RunArgs};
use clap::Parser;
use proptest::prelude::*;

use ipivmm_testkit::proptest_config as config;

/// `ipivmm run ARGS...` as clap parses it (never exits the process).
fn parse_run(args: &[String]) -> Result<RunArgs, clap::Error> {
    let argv = ["ipivmm", "run"]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned());
    match Cli::try_parse_from(argv)?.command {
        Command::Run(r) => Ok(*r),
        _ => Err(clap::Error::new(clap::error::ErrorKind::InvalidSubcommand)),
    }
}

/// Values users get wrong: numbers of every size and sign, hex with and
/// without prefix, blanks, junk, unicode.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<u128>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| format!("{v:#x}")),
        (0u64..300).prop_map(|v| v.to_string()),
        (0u64..300).prop_map(|v| format!("{v:#x}")),
        Just(String::new()),
        Just("0x".to_string()),
        Just("-0".to_string()),
        Just("1e3".to_string()),
        Just(" 1".to_string()),
        "\\PC{0,12}",
        "[a-z0-9,-]{0,12}",
    ]
}

const VALUE_FLAGS: &[&str] = &[
    "--vcpus",
    "--apic",
    "--irqchip",
    "--ipi",
    "--workload",
    "--target",
    "--iterations",
    "--warmup",
    "--vector",
    "--memory",
    "--timeout",
    "--param",
    "--serial",
    "--payload",
    "--json",
    "--csv",
    "--plot",
    "--kvm-device",
    "--pin",
    "--halt-poll-ns",
    "--disable-exits",
    "--apicv",
];

/// Expected value of a u64 flag under ipivmm's own number syntax
/// (decimal, or hex with a `0x` prefix).
fn as_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

proptest! {
    #![proptest_config(config())]

    /// Numeric flags: accepted exactly when the value is a number in range.
    #[test]
    fn numeric_flags_parse_exactly_numbers(v in value()) {
        for flag in ["--vcpus", "--iterations", "--warmup", "--memory", "--timeout", "--param"] {
            let r = parse_run(&[format!("{flag}={v}")]);
            let want = match flag {
                "--vcpus" => v.parse::<usize>().ok().map(|n| n as u64),
                "--param" => as_u64(&v),
                _ => v.parse::<u64>().ok(),
            };
            prop_assert_eq!(r.is_ok(), want.is_some(), "{}={:?}: {:?}", flag, v, r.err().map(|e| e.to_string()));
        }
        let r = parse_run(&[format!("--vector={v}")]);
        let want = as_u64(&v).filter(|n| *n <= 0xff);
        prop_assert_eq!(r.as_ref().ok().map(|a| u64::from(a.vector)), want, "--vector={:?}", v);
    }

    /// Any mix of `run` flags with any values: clap, `to_config` and
    /// `validate` answer with a value or an error, never a panic.
    #[test]
    fn any_run_command_line_is_handled(args in proptest::collection::vec(
        (0..VALUE_FLAGS.len(), value()), 0..12), max in 0usize..1024) {
        let argv: Vec<String> = args.iter().map(|(f, v)| format!("{}={v}", VALUE_FLAGS[*f])).collect();
        if let Ok(run) = parse_run(&argv) {
            if let Ok(c) = run.to_config() {
                let _ = c.validate(max);
            }
        }
    }
}
