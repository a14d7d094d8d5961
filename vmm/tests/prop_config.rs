//! Property tests of everything a user gives the library before a VM exists:
//! `VmConfig::validate`, `mode::check`, the mode-name parsers, and
//! `payload::image::check` on mutated ELF images. No input may panic; what is
//! accepted must be a configuration `run` can honour. (The command line's
//! own properties are unit tests of the binary: cli/src/cli/prop_tests.rs.)
//!
//! Cases per property: 256, or `IPIVMM_PROPTEST_CASES` for long campaigns.
use ipivmm::config::{ConfigError, PayloadSource, VmConfig};
use ipivmm::payload::image::{ImageError, ImageInfo};
use ipivmm_abi::{MAX_VCPUS, PAYLOAD_END, PAYLOAD_START};
use ipivmm_analysis::mode::{ApicMode, IpiPath, Irqchip, TargetWait, Workload};
use ipivmm_testkit::images::elf64 as minimal_elf;
use proptest::prelude::*;
use std::str::FromStr;
use std::time::Duration;

use ipivmm_testkit::proptest_config as config;

/// A configuration with arbitrary fields, edges included.
fn vm_config() -> impl Strategy<Value = (VmConfig, usize)> {
    let mem = prop_oneof![
        Just(VmConfig::MIN_MEMORY_BYTES - 1),
        Just(VmConfig::MIN_MEMORY_BYTES),
        Just(VmConfig::MAX_MEMORY_BYTES),
        Just(VmConfig::MAX_MEMORY_BYTES + 1),
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
        Just(0x1000),   // ipivmm's boot info
        Just(0x2_0000), // its GDTs
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

    /// Mode flags: accepted exactly for their documented names, and the
    /// error names what was given.
    #[test]
    fn mode_names_parse_exactly_their_choices(s in prop_oneof![
        "\\PC{0,12}",
        Just("x2apic".to_string()), Just("XAPIC".to_string()), Just("pv ".to_string()),
        Just("kernel".to_string()), Just("halt".to_string()), Just("all-to-all".to_string()),
    ]) {
        let ok = |r: bool, names: &[&str]| r == names.contains(&s.as_str());
        prop_assert!(ok(ApicMode::from_str(&s).is_ok(), &["xapic", "x2apic"]));
        prop_assert!(ok(IpiPath::from_str(&s).is_ok(), &["icr", "pv"]));
        prop_assert!(ok(TargetWait::from_str(&s).is_ok(), &["spin", "halt"]));
        prop_assert!(ok(Irqchip::from_str(&s).is_ok(), &["kernel", "split", "user"]));
        let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
        prop_assert!(ok(Workload::from_str(&s).is_ok(), &names));
    }

    /// `validate` accepts only configurations inside every documented limit.
    #[test]
    fn validate_accepts_only_runnable_configs((c, max) in vm_config()) {
        match c.validate(max) {
            Ok(()) => {
                prop_assert!(c.vcpus >= 1 && c.vcpus <= max.min(MAX_VCPUS));
                prop_assert!((VmConfig::MIN_MEMORY_BYTES..=VmConfig::MAX_MEMORY_BYTES).contains(&c.memory_bytes));
                prop_assert!(c.iterations >= 1);
                prop_assert!(c.iterations.saturating_mul(8) <= c.scratch_bytes_per_vcpu());
                prop_assert!((0x20..=0xfe).contains(&c.ipi_vector));
                prop_assert!(!c.timeout.is_zero());
                // What validate leaves to the mode check, the mode check refuses.
                let pv_user = c.ipi == IpiPath::Pv && c.irqchip == Irqchip::User;
                prop_assert!(!pv_user || c.check_mode(None).is_err());
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
        if let Ok(info) = ImageInfo::check(&e) {
            prop_assert!(info.start >= PAYLOAD_START && info.end <= PAYLOAD_END, "{:?}", info);
            prop_assert!(info.start <= info.entry && info.entry < info.end, "{:?}", info);
        }
    }

    /// Segments anywhere outside the payload range (onto ipivmm's page
    /// tables, GDT, boot info, stacks, or past RAM) are refused by name.
    #[test]
    fn segments_outside_the_payload_range_are_refused(addr in edge_u64(), len in 1usize..0x2000) {
        let code = vec![0xf4u8; len];
        let r = ImageInfo::check(&minimal_elf(addr, &code));
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
    let r = ImageInfo::check(&e);
    assert!(matches!(r, Err(ImageError::Truncated(_))), "{r:?}");
}
