//! Property tests of everything a user types before a VM exists: the
//! command-line value parsers (through clap, as `ipivmm run` parses them),
//! `RunArgs::to_config`, `VmConfig::validate`, the mode-name parsers, and
//! `payload_image::check` on mutated ELF images. No input may panic; what is
//! accepted must be a configuration `run` can honour.
//!
//! Cases per property: 256, or `IPIVMM_PROPTEST_CASES` for long campaigns.
use clap::Parser;
use ipivmm::cli::{Cli, Command};
use ipivmm::config::{
    parse_apic, parse_ipi, parse_target, parse_workload, ConfigError, Irqchip, PayloadSource,
    VmConfig,
};
use ipivmm::layout;
use ipivmm::payload_image::{check, minimal_elf, ImageError};
use ipivmm_abi::{ApicMode, IpiPath, TargetWait, Workload, MAX_VCPUS, PAYLOAD_END, PAYLOAD_START};
use proptest::prelude::*;
use std::time::Duration;

fn cases() -> u32 {
    std::env::var("IPIVMM_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// `ipivmm run ARGS...` as clap parses it (never exits the process).
fn parse_run(args: &[String]) -> Result<ipivmm::cli::RunArgs, clap::Error> {
    let argv = ["ipivmm", "run"]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned());
    match Cli::try_parse_from(argv)?.command {
        Command::Run(r) => Ok(r),
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

/// A configuration with arbitrary fields, edges included.
fn vm_config() -> impl Strategy<Value = (VmConfig, usize)> {
    let mem = prop_oneof![
        Just(layout::MIN_MEM_BYTES - 1),
        Just(layout::MIN_MEM_BYTES),
        Just(layout::MAX_MEM_BYTES),
        Just(layout::MAX_MEM_BYTES + 1),
        Just(0u64),
        any::<u64>(),
        (0u64..4096).prop_map(|m| m << 20),
    ];
    let iters = prop_oneof![
        Just(0u64),
        1u64..100_000,
        any::<u64>(),
        Just(u64::MAX / 8 + 1)
    ];
    (
        (
            prop_oneof![0usize..300, any::<usize>()],
            mem,
            iters,
            any::<u64>(),
        ),
        (any::<u8>(), 0u64..3, 0u8..3, 0u8..2),
        (0u8..2, 0u8..2, 0usize..7, any::<bool>()),
        prop_oneof![0usize..300, any::<usize>()],
    )
        .prop_map(
            |(
                (vcpus, memory_bytes, iterations, warmup),
                (vec, timeout, chip, apic),
                (ipi, target, w, builtin),
                max,
            )| {
                let c = VmConfig {
                    vcpus,
                    memory_bytes,
                    iterations,
                    warmup,
                    ipi_vector: vec,
                    timeout: Duration::from_secs(timeout),
                    irqchip: [Irqchip::Kernel, Irqchip::Split, Irqchip::User][chip as usize],
                    apic: [ApicMode::Xapic, ApicMode::X2apic][apic as usize],
                    ipi: [IpiPath::Icr, IpiPath::Pv][ipi as usize],
                    target_wait: [TargetWait::Spin, TargetWait::Halt][target as usize],
                    workload: Workload::ALL[w],
                    payload: if builtin {
                        PayloadSource::Builtin
                    } else {
                        PayloadSource::Bytes(Vec::new())
                    },
                    ..VmConfig::default()
                };
                (c, max)
            },
        )
}

/// Offsets of the ELF header and first program header fields worth hitting.
const ELF_FIELDS: &[(usize, usize)] = &[
    (4, 1),       // class
    (5, 1),       // data
    (16, 2),      // e_type
    (18, 2),      // e_machine
    (24, 8),      // e_entry
    (32, 8),      // e_phoff
    (54, 2),      // e_phentsize
    (56, 2),      // e_phnum
    (64, 4),      // p_type
    (64 + 8, 8),  // p_offset
    (64 + 16, 8), // p_vaddr
    (64 + 24, 8), // p_paddr
    (64 + 32, 8), // p_filesz
    (64 + 40, 8), // p_memsz
];

fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..256,
        (0u64..0x1000).prop_map(|d| PAYLOAD_START - 0x800 + d),
        (0u64..0x1000).prop_map(|d| PAYLOAD_END - 0x800 + d),
        Just(0x1000u64),
        Just(layout::BOOT_INFO),
        Just(layout::GDT_BASE),
        (0u64..64).prop_map(|d| u64::MAX - d),
        (0u64..64).prop_map(|d| (1u64 << 63) + d),
        (0u64..64).prop_map(|d| u64::from(u32::MAX) - d),
        any::<u64>(),
    ]
}

#[derive(Debug, Clone)]
enum ElfMutation {
    Field(usize, u64),
    Byte(usize, u8),
    Truncate(usize),
}

fn elf_mutation() -> impl Strategy<Value = ElfMutation> {
    prop_oneof![
        (0..ELF_FIELDS.len(), edge_u64()).prop_map(|(f, v)| ElfMutation::Field(f, v)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| ElfMutation::Byte(i, b)),
        any::<usize>().prop_map(ElfMutation::Truncate),
    ]
}

fn apply(e: &mut Vec<u8>, m: &ElfMutation) {
    match *m {
        ElfMutation::Field(f, v) => {
            let (off, len) = ELF_FIELDS[f];
            if let Some(dst) = e.get_mut(off..off + len) {
                dst.copy_from_slice(&v.to_le_bytes()[..len]);
            }
        }
        ElfMutation::Byte(i, b) => {
            if !e.is_empty() {
                let i = i % e.len();
                e[i] = b;
            }
        }
        ElfMutation::Truncate(n) => e.truncate(n % (e.len() + 1)),
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

    /// Mode flags: accepted exactly for their documented names, and the
    /// error names what was given.
    #[test]
    fn mode_names_parse_exactly_their_choices(s in prop_oneof![
        "\\PC{0,12}",
        Just("x2apic".to_string()), Just("XAPIC".to_string()), Just("pv ".to_string()),
        Just("kernel".to_string()), Just("halt".to_string()), Just("all-to-all".to_string()),
    ]) {
        let ok = |r: bool, names: &[&str]| r == names.contains(&s.as_str());
        prop_assert!(ok(parse_apic(&s).is_ok(), &["xapic", "x2apic"]));
        prop_assert!(ok(parse_ipi(&s).is_ok(), &["icr", "pv"]));
        prop_assert!(ok(parse_target(&s).is_ok(), &["spin", "halt"]));
        prop_assert!(ok(s.parse::<Irqchip>().is_ok(), &["kernel", "split", "user"]));
        let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
        prop_assert!(ok(parse_workload(&s).is_ok(), &names));
        if let Err(e) = parse_apic(&s) {
            prop_assert!(e.to_string().contains(&s));
        }
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

    /// `validate` accepts only configurations inside every documented limit.
    #[test]
    fn validate_accepts_only_runnable_configs((c, max) in vm_config()) {
        match c.validate(max) {
            Ok(()) => {
                prop_assert!(c.vcpus >= 1 && c.vcpus <= max.min(MAX_VCPUS));
                prop_assert!((layout::MIN_MEM_BYTES..=layout::MAX_MEM_BYTES).contains(&c.memory_bytes));
                prop_assert!(c.iterations >= 1);
                prop_assert!(c.iterations.saturating_mul(8) <= layout::scratch_stride(c.memory_bytes, c.vcpus));
                prop_assert!((0x20..=0xfe).contains(&c.ipi_vector));
                prop_assert!(!c.timeout.is_zero());
                prop_assert!(!(c.ipi == IpiPath::Pv && c.irqchip == Irqchip::User));
            }
            Err(ConfigError::VcpuCount { got, .. }) => prop_assert_eq!(got, c.vcpus),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    /// Mutated ELF images: a reason or an image entirely inside the payload
    /// range with its entry in a loaded segment.
    #[test]
    fn payload_check_never_panics(addr in edge_u64(), code in proptest::collection::vec(any::<u8>(), 1..64),
                                  muts in proptest::collection::vec(elf_mutation(), 0..4)) {
        let mut e = minimal_elf(addr, &code);
        for m in &muts {
            apply(&mut e, m);
        }
        if let Ok(info) = check(&e) {
            prop_assert!(info.start >= PAYLOAD_START && info.end <= PAYLOAD_END, "{:?}", info);
            prop_assert!(info.start <= info.entry && info.entry < info.end, "{:?}", info);
        }
    }

    /// Segments anywhere outside the payload range (onto ipivmm's page
    /// tables, GDT, boot info, stacks, or past RAM) are refused by name.
    #[test]
    fn segments_outside_the_payload_range_are_refused(addr in edge_u64(), len in 1usize..0x2000) {
        let code = vec![0xf4u8; len];
        let r = check(&minimal_elf(addr, &code));
        let inside = addr >= PAYLOAD_START && addr.checked_add(len as u64).is_some_and(|e| e <= PAYLOAD_END);
        if inside {
            prop_assert!(r.is_ok(), "{:?}", r);
        } else {
            let refused = matches!(r, Err(ImageError::SegmentOutOfRange { .. }));
            prop_assert!(refused, "{:#x}+{}: {:?}", addr, len, r);
        }
    }
}

/// Regression: an `e_phoff` within a few bytes of `u64::MAX` used to make
/// `check` overflow `off + 4` while reading the first program header (a
/// panic in debug builds, reachable with `--payload`); it is refused now.
#[test]
fn elf_with_phoff_near_u64_max_is_refused() {
    let mut e = minimal_elf(PAYLOAD_START, &[0xf4]);
    e[32..40].copy_from_slice(&(u64::MAX - 2).to_le_bytes());
    let r = check(&e);
    assert!(matches!(r, Err(ImageError::Truncated(_))), "{r:?}");
}
