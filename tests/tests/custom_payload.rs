//! A custom payload end to end, the way a user drives one: build
//! `examples/exit-roundtrip` from source with `ipivmm::payload::build`, check
//! the ELF has no SSE, and run it through the library API
//! (`PayloadSource::File`), asserting on its phases, samples and records.
//! The build needs cargo (it skips, saying so, without it); the run needs
//! /dev/kvm. `IPIVMM_EXAMPLE_PAYLOAD=ELF` runs a prebuilt example instead (the lab).

use ipivmm::config::{PayloadSource, VmConfig};
use ipivmm::payload::build::PayloadBuild;
use ipivmm::payload::CrateError;
use ipivmm_analysis::results::ExitKind;
use ipivmm_analysis::results::{PhaseResult, VcpuEnd, VcpuResult};
use ipivmm_tests::{kvm_available, run_ok, skip, Need};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The example's phases, in the order it runs them (id = index).
const PHASES: [&str; 4] = ["baseline", "cpuid", "pio", "rdmsr"];
const ITERATIONS: u64 = 200;
const WARMUP: u64 = 20;

/// The example's ELF, built once per test process; None (after printing why)
/// when cargo cannot be run.
fn example_elf(test: &str) -> Option<PathBuf> {
    static ELF: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = ELF.get_or_init(|| {
        // The lab's guest has no cargo: it hands over the ELF built on the host.
        if let Some(prebuilt) = std::env::var_os("IPIVMM_EXAMPLE_PAYLOAD") {
            return Ok(PathBuf::from(prebuilt));
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/exit-roundtrip");
        PayloadBuild::new(dir)
            .target_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join("exit-roundtrip-target"))
            .offline(true)
            .locked(true)
            .build()
            .map_err(|e| match e {
                // No cargo, or one this user may not run (root's
                // ~/.cargo as another user): a setup this test lacks.
                CrateError::Spawn { error, .. }
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                    ) =>
                {
                    format!("SKIP: cargo cannot be run ({error})")
                }
                e => format!("FAIL: {e}"),
            })
    });
    match built {
        Ok(p) => Some(p.clone()),
        Err(e) if e.starts_with("SKIP") => {
            skip(
                test,
                Need::Setup,
                &format!("cannot build examples/exit-roundtrip: {e}"),
            );
            None
        }
        Err(e) => panic!("building examples/exit-roundtrip: {e}"),
    }
}

#[test]
fn example_payload_builds_as_a_static_sse_free_executable() {
    let Some(elf) = example_elf("example_payload_builds_as_a_static_sse_free_executable") else {
        return;
    };
    let bytes = std::fs::read(&elf).expect("read the built payload");
    let info = ipivmm::payload::image::ImageInfo::check(&bytes)
        .expect("the example passes the loader's checks");
    assert_eq!(
        info.start,
        ipivmm_abi::PAYLOAD_START,
        "linked at the payload base"
    );

    let out = match Command::new("objdump")
        .arg("-d")
        .arg("--no-show-raw-insn")
        .arg(&elf)
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("objdump not found: install binutils to check the example payload for SSE")
        }
        Err(e) => panic!("cannot run objdump: {e}"),
    };
    assert!(
        out.status.success(),
        "objdump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let insns: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once(":\t").map(|(_, i)| i))
        .collect();
    assert!(
        insns.len() > 100,
        "objdump printed only {} instructions",
        insns.len()
    );
    let simd: Vec<&&str> = insns
        .iter()
        .filter(|i| {
            ["%xmm", "%ymm", "%zmm", "%mm", "%st"]
                .iter()
                .any(|r| i.contains(r))
        })
        .collect();
    assert!(
        simd.is_empty(),
        "SSE/x87 instructions in the example: {:?}",
        &simd[..simd.len().min(10)]
    );
}

fn phase<'a>(v: &'a VcpuResult, name: &str) -> &'a PhaseResult {
    v.phase_named(name)
        .unwrap_or_else(|| panic!("vcpu{} has no phase '{name}': {:?}", v.index, names(v)))
}

fn names(v: &VcpuResult) -> Vec<&str> {
    v.phases.iter().map(|p| p.name.as_str()).collect()
}

fn p50(p: &PhaseResult) -> u64 {
    p.latency.as_ref().map(|l| l.p50).unwrap_or(0)
}

#[test]
fn example_payload_measures_exit_round_trips_through_the_library() {
    const TEST: &str = "example_payload_measures_exit_round_trips_through_the_library";
    if !kvm_available(TEST) {
        return;
    }
    let Some(elf) = example_elf(TEST) else { return };
    let config = VmConfig {
        vcpus: 2,
        iterations: ITERATIONS,
        warmup: WARMUP,
        timeout: ipivmm_testkit::scaled(Duration::from_secs(120)),
        payload: PayloadSource::File(elf),
        tracepoints: false,
        ..VmConfig::default()
    };
    let report = run_ok(&config);
    assert!(
        report.succeeded(),
        "status {:?}\nserial:\n{}",
        report.status,
        report.serial_tail
    );
    assert!(
        report.serial_tail.contains("exit-roundtrip: done"),
        "serial:\n{}",
        report.serial_tail
    );
    assert_eq!(report.vcpus.len(), 2);

    for v in &report.vcpus {
        assert_eq!(
            v.end,
            Some(VcpuEnd::Done {
                status: 0,
                message: "ok".into()
            }),
            "vcpu{}",
            v.index
        );
        assert!(
            v.rejected_messages.is_empty(),
            "vcpu{}: {:?}",
            v.index,
            v.rejected_messages
        );
        assert_eq!(names(v), PHASES, "vcpu{} phases in order", v.index);
        for (id, p) in v.phases.iter().enumerate() {
            assert_eq!(p.id, id as u32, "vcpu{} phase {}", v.index, p.name);
            assert_eq!(
                p.samples.len() as u64,
                ITERATIONS,
                "vcpu{} {} samples",
                v.index,
                p.name
            );
            let lat = p
                .latency
                .as_ref()
                .unwrap_or_else(|| panic!("vcpu{} {}: no latency", v.index, p.name));
            assert_eq!(lat.count, ITERATIONS, "vcpu{} {}", v.index, p.name);
            assert!(
                lat.min > 0 && lat.min <= lat.p50 && lat.p50 <= lat.max,
                "{lat:?}"
            );
            assert!(
                !p.records.contains_key("samples_dropped"),
                "{:?}",
                p.records
            );
            // No IPIs in this payload.
            assert_eq!(
                p.guest.ipis_sent + p.guest.ipis_received,
                0,
                "{:?}",
                p.guest
            );
        }

        // `in` from the unclaimed port 0x80: one userspace I/O exit per
        // iteration in the window, and nothing else reads a port there.
        let pio = phase(v, "pio");
        assert_eq!(
            pio.exits.get(ExitKind::IoIn),
            ITERATIONS,
            "vcpu{} pio exits",
            v.index
        );
        assert_eq!(pio.records.get("port"), Some(&0x80));
        assert_eq!(
            pio.records.get("value"),
            Some(&0xff),
            "unclaimed ports read all-ones"
        );
        assert_eq!(v.unclaimed_accesses, ITERATIONS + WARMUP, "vcpu{}", v.index);

        // CPUID and RDMSR(APIC_BASE) stay in the kernel: no userspace exit.
        let cpuid = phase(v, "cpuid");
        assert_eq!(cpuid.exits.get(ExitKind::IoIn), 0);
        assert!(
            cpuid.records.get("max_leaf").is_some_and(|&l| l >= 1),
            "{:?}",
            cpuid.records
        );
        let rdmsr = phase(v, "rdmsr");
        assert_eq!(rdmsr.exits.get(ExitKind::MsrRead), 0);
        assert_eq!(rdmsr.records.get("msr"), Some(&0x1b));
        let apic_base = rdmsr.records.get("value").copied().unwrap_or(0);
        assert_eq!(
            apic_base & 0xffff_f000,
            0xfee0_0000,
            "APIC_BASE {apic_base:#x}"
        );
        assert_ne!(
            apic_base & (1 << 11),
            0,
            "APIC enabled by the SDK: {apic_base:#x}"
        );

        // Every exit costs more than the two TSC reads around nothing.
        let base = p50(phase(v, "baseline"));
        for name in ["cpuid", "pio", "rdmsr"] {
            let p = p50(phase(v, name));
            assert!(
                p > base,
                "vcpu{} {name} p50 {p} <= baseline p50 {base}",
                v.index
            );
        }
        eprintln!(
            "vcpu{}: p50 cycles baseline {base}, cpuid {}, pio {}, rdmsr {}",
            v.index,
            p50(cpuid),
            p50(pio),
            p50(rdmsr)
        );
    }
}
