//! A multiboot kernel (`--kernel` of a file with a multiboot header, the
//! format of kvm-unit-tests' x86 `.flat` tests), booted for real with
//! ipivmm's own test kernel (tests/multiboot/hello.S, its bytes below):
//! entered in 32-bit protected mode with the multiboot magic in EAX, it
//! prints the command line its info structure (EBX) points to and the CPU
//! count fw_cfg gives, runs three "tests" of known port accesses, each
//! ending with a line as kvm-unit-tests' vmexit prints (which ends a phase
//! per test), and ends the run through the isa-debug-exit port.
//! kvm-unit-tests itself cannot be fetched in CI (docs/kvm-unit-tests.md
//! records the runs of its vmexit.flat here); this covers the same path.
use ipivmm::config::{PayloadSource, VmConfig};
use ipivmm::multiboot::MultibootGuest;
use ipivmm::run::{run, RunOptions};
use ipivmm_analysis::results::{ExitKind, RunStatus, VcpuEnd};
use ipivmm_testkit::images::{elf32, multiboot_header, MULTIBOOT_AOUT_KLUDGE};
use ipivmm_tests::kvm_available;
use std::path::PathBuf;
use std::time::Duration;

/// tests/multiboot/hello.S, `as --32` and `objcopy -O binary`: a `jmp` over
/// the 12-byte header at offset 4, the code from offset 0x10.
const HELLO: &[u8] = &[
    0xeb, 0x0e, 0x66, 0x90, 0x02, 0xb0, 0xad, 0x1b, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x4f, 0x52, 0xe4,
    0x3d, 0x02, 0xb0, 0xad, 0x2b, 0x0f, 0x85, 0xd1, 0x00, 0x00, 0x00, 0x8b, 0x73, 0x10, 0x66, 0xba,
    0xf8, 0x03, 0xac, 0x84, 0xc0, 0x74, 0x03, 0xee, 0xeb, 0xf8, 0xb0, 0x0a, 0xee, 0x66, 0xba, 0x10,
    0x05, 0x66, 0xb8, 0x05, 0x00, 0x66, 0xef, 0x66, 0x42, 0xec, 0x04, 0x30, 0x66, 0xba, 0xf8, 0x03,
    0xee, 0xb0, 0x0a, 0xee, 0xb9, 0x64, 0x00, 0x00, 0x00, 0x66, 0xba, 0x10, 0x05, 0x66, 0xef, 0xe2,
    0xfc, 0x66, 0xba, 0xf8, 0x03, 0xb0, 0x6f, 0xee, 0xb0, 0x75, 0xee, 0xb0, 0x74, 0xee, 0xb0, 0x73,
    0xee, 0xb0, 0x20, 0xee, 0xb0, 0x31, 0xee, 0xb0, 0x30, 0xee, 0xb0, 0x30, 0xee, 0xb0, 0x0a, 0xee,
    0xb9, 0x3c, 0x00, 0x00, 0x00, 0x66, 0xba, 0x11, 0x05, 0xec, 0xe2, 0xfd, 0x66, 0xba, 0xf8, 0x03,
    0xb0, 0x69, 0xee, 0xb0, 0x6e, 0xee, 0xb0, 0x73, 0xee, 0xb0, 0x20, 0xee, 0xb0, 0x36, 0xee, 0xb0,
    0x30, 0xee, 0xb0, 0x0a, 0xee, 0xb0, 0x20, 0xee, 0xb0, 0x20, 0xee, 0xb0, 0x69, 0xee, 0xb0, 0x70,
    0xee, 0xb0, 0x69, 0xee, 0xb0, 0x20, 0xee, 0xb0, 0x69, 0xee, 0xb0, 0x6e, 0xee, 0xb0, 0x73, 0xee,
    0xb0, 0x20, 0xee, 0xb0, 0x37, 0xee, 0xb0, 0x0a, 0xee, 0xb9, 0x1e, 0x00, 0x00, 0x00, 0x66, 0xba,
    0x10, 0x05, 0x66, 0xef, 0xe2, 0xfc, 0x66, 0xba, 0xf8, 0x03, 0xb0, 0x6f, 0xee, 0xb0, 0x75, 0xee,
    0xb0, 0x74, 0xee, 0xb0, 0x73, 0xee, 0xb0, 0x20, 0xee, 0xb0, 0x33, 0xee, 0xb0, 0x30, 0xee, 0xb0,
    0x0a, 0xee, 0x31, 0xc0, 0x66, 0xba, 0xf4, 0x00, 0xef, 0xf4, 0xeb, 0xfd, 0x66, 0xba, 0xf8, 0x03,
    0xb0, 0x21, 0xee, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xeb, 0xea,
];
/// Where the code after the header starts in [`HELLO`].
const CODE: usize = 0x10;
/// Where both images load.
const LOAD: u32 = 0x10_0000;

/// The kernel as kvm-unit-tests ships its tests: an ELF32 with one PT_LOAD.
fn elf_image() -> Vec<u8> {
    assert_eq!(&HELLO[4..16], &multiboot_header(0, None)[..], "the header");
    elf32(HELLO, LOAD, 0)
}

/// The same code as a flat image placed by the header's address fields
/// (flag bit 16): a `jmp` over the 32-byte header, then the code.
fn flat_image() -> Vec<u8> {
    // header_addr, load_addr, load_end_addr (0: to the end of the file),
    // bss_end_addr, entry_addr.
    let a = [LOAD + 4, LOAD, 0, LOAD + 0x1000, LOAD];
    let mut v = vec![0xeb, 0x22, 0x66, 0x90];
    v.extend(multiboot_header(MULTIBOOT_AOUT_KLUDGE, Some(a)));
    assert_eq!(v.len(), 0x24);
    v.extend_from_slice(&HELLO[CODE..]);
    v
}

fn write(test: &str, name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ipivmm-multiboot-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn config(kernel: PathBuf, vcpus: usize, append: &str) -> VmConfig {
    VmConfig {
        vcpus,
        memory_bytes: 32 << 20,
        timeout: Duration::from_secs(30),
        tracepoints: false,
        payload: PayloadSource::Multiboot(MultibootGuest {
            kernel,
            cmdline: append.into(),
        }),
        ..Default::default()
    }
}

/// What the test kernel prints after its command line and CPU count.
const TEST_LINES: &str = "outs 100\nins 60\n  ipi ins 7\nouts 30\n";

/// One phase of vCPU 0 as hello.S makes it: port writes, port reads, records.
struct Expected {
    name: &'static str,
    io_out: u64,
    io_in: u64,
    records: &'static [(&'static str, u64)],
}

fn boots_and_exits(kernel: PathBuf, file: &str) {
    let r = run(&config(kernel, 3, "ipi x"), RunOptions::default()).expect("the run starts");
    assert_eq!(r.status, RunStatus::Completed, "{}", r.status.text());
    // The command line is "FILE ARGS" (as QEMU passes it), the CPU count 3.
    assert_eq!(r.serial_tail, format!("{file} ipi x\n3\n{TEST_LINES}"));
    // vCPU 0's port accesses per phase, from hello.S's loop counts and the
    // bytes of its lines: the boot's command line, CPU count and fw_cfg
    // accesses; each test's loop and its own line; the figure line
    // (`  ipi ins 7`, 12 bytes) after `ins 60`, so in the next test; the
    // exit port in the rest.
    let expected = [
        Expected {
            name: "boot",
            io_out: (file.len() + " ipi x\n".len() + 1 + "3\n".len()) as u64,
            io_in: 1,
            records: &[],
        },
        Expected {
            name: "outs",
            io_out: 100 + "outs 100\n".len() as u64,
            io_in: 0,
            records: &[("cycles", 100)],
        },
        Expected {
            name: "ins",
            io_out: "ins 60\n".len() as u64,
            io_in: 60,
            records: &[("cycles", 60), ("ipi_cycles", 7)],
        },
        Expected {
            name: "outs#2",
            io_out: "  ipi ins 7\n".len() as u64 + 30 + "outs 30\n".len() as u64,
            io_in: 0,
            records: &[("cycles", 30)],
        },
        Expected {
            name: "rest",
            io_out: 1,
            io_in: 0,
            records: &[],
        },
    ];
    for v in &r.vcpus {
        match (&v.end, v.index) {
            (Some(VcpuEnd::Done { status: 0, message }), 0) => {
                assert!(message.contains("isa-debug-exit"), "{message}")
            }
            // The APs never left their wait for INIT (the kernel sends none).
            (Some(VcpuEnd::Done { status: 0, message }), _) => {
                assert!(message.contains("another vCPU"), "{message}")
            }
            (other, i) => panic!("vcpu{i} ended {other:?}"),
        }
        // Every vCPU has every phase, in order, each complete: the lines
        // ended them on all vCPUs, the exit port the last.
        let phases: Vec<(u32, &str)> = v.phases.iter().map(|p| (p.id, p.name.as_str())).collect();
        let names: Vec<(u32, &str)> = (1..).zip(expected.iter().map(|e| e.name)).collect();
        assert_eq!(phases, names, "vcpu{}", v.index);
        assert!(v.phases.iter().all(|p| !p.unfinished), "vcpu{}", v.index);
        for (p, e) in v.phases.iter().zip(&expected) {
            let io = (p.exits.get(ExitKind::IoOut), p.exits.get(ExitKind::IoIn));
            let records: Vec<(&str, u64)> =
                p.records.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            if v.index == 0 {
                assert_eq!(io, (e.io_out, e.io_in), "vcpu0 phase {}", e.name);
                // The test's own figure beside the counters, on the vCPU
                // that printed it.
                assert_eq!(records, e.records, "vcpu0 phase {}", e.name);
            } else {
                assert_eq!(
                    (io, records),
                    ((0, 0), vec![]),
                    "vcpu{} phase {}",
                    v.index,
                    e.name
                );
            }
        }
        // The phases tile the run: no exit fell between two of them.
        let summed: u64 = v.phases.iter().map(|p| p.exits.total()).sum();
        assert_eq!(summed, v.exits.total(), "vcpu{}", v.index);
    }
    assert_eq!(
        r.mode.payload.as_deref(),
        Some(format!("multiboot:{file}").as_str())
    );
}

#[test]
fn an_elf32_multiboot_kernel_reads_its_command_line_and_fw_cfg_and_exits() {
    if !kvm_available("an_elf32_multiboot_kernel_reads_its_command_line_and_fw_cfg_and_exits") {
        return;
    }
    boots_and_exits(write("elf", "hello.flat", &elf_image()), "hello.flat");
}

#[test]
fn a_flat_multiboot_kernel_loads_by_its_address_fields() {
    if !kvm_available("a_flat_multiboot_kernel_loads_by_its_address_fields") {
        return;
    }
    boots_and_exits(write("flat", "hello.bin", &flat_image()), "hello.bin");
}

#[test]
fn a_nonzero_exit_value_fails_the_run_with_the_guests_status() {
    if !kvm_available("a_nonzero_exit_value_fails_the_run_with_the_guests_status") {
        return;
    }
    // ELF32 with: mov eax, 5; mov dx, 0xf4; out dx, eax; hlt (after the
    // jmp over the header).
    let mut code = HELLO[..CODE].to_vec();
    code.extend_from_slice(&[
        0xb8, 0x05, 0x00, 0x00, 0x00, 0x66, 0xba, 0xf4, 0x00, 0xef, 0xf4,
    ]);
    let k = write("fail", "fail.flat", &elf32(&code, LOAD, 0));
    let r = run(&config(k, 1, ""), RunOptions::default()).expect("the run starts");
    assert!(
        matches!(r.status, RunStatus::Failed { .. }),
        "{}",
        r.status.text()
    );
    match &r.vcpus[0].end {
        Some(VcpuEnd::Done { status: 5, message }) => {
            assert!(message.contains("exit status 11"), "{message}")
        }
        other => panic!("vcpu0 ended {other:?}"),
    }
    // It printed nothing: its one phase is the whole run, ended by the port.
    let p = r.vcpus[0].phase(1).expect("the whole-run phase");
    assert_eq!((p.name.as_str(), p.unfinished), ("run", false));
}

#[test]
fn a_kernel_that_prints_no_test_line_runs_in_one_phase() {
    if !kvm_available("a_kernel_that_prints_no_test_line_runs_in_one_phase") {
        return;
    }
    // ELF32 with: mov dx, 0x3f8; two lines, "a" and "b" (each a checkpoint
    // the boot could end at); xor eax, eax; mov dx, 0xf4; out dx, eax; hlt.
    let mut code = HELLO[..CODE].to_vec();
    code.extend_from_slice(&[
        0x66, 0xba, 0xf8, 0x03, 0xb0, 0x61, 0xee, 0xb0, 0x0a, 0xee, 0xb0, 0x62, 0xee, 0xb0, 0x0a,
        0xee, 0x31, 0xc0, 0x66, 0xba, 0xf4, 0x00, 0xef, 0xf4,
    ]);
    let k = write("lines", "lines.flat", &elf32(&code, LOAD, 0));
    let r = run(&config(k, 2, ""), RunOptions::default()).expect("the run starts");
    assert_eq!(r.status, RunStatus::Completed, "{}", r.status.text());
    assert_eq!(r.serial_tail, "a\nb\n");
    for v in &r.vcpus {
        // The windows between the lines are joined back into one phase:
        // the whole run, as for a kernel that prints nothing.
        let phases: Vec<(u32, &str, bool)> = v
            .phases
            .iter()
            .map(|p| (p.id, p.name.as_str(), p.unfinished))
            .collect();
        assert_eq!(phases, [(1, "run", false)], "vcpu{}", v.index);
        assert_eq!(v.phases[0].exits, v.exits, "vcpu{}", v.index);
    }
    // Four serial bytes and the exit port.
    assert_eq!(r.vcpus[0].phases[0].exits.get(ExitKind::IoOut), 5);
}

#[test]
fn a_kernel_that_does_not_fit_is_refused_before_a_vm_exists() {
    // No KVM needed: the file is checked first.
    let mut c = config(write("big", "hello.flat", &elf_image()), 1, "");
    c.memory_bytes = 1 << 20;
    let e = run(&c, RunOptions::default()).unwrap_err().to_string();
    assert!(e.contains("raise --memory") && !e.contains('\n'), "{e}");
    assert!(!e.contains("payload ELF"), "{e}");
    let junk = write("junk", "junk.flat", &[0u8; 64]);
    let e = run(&config(junk, 1, ""), RunOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no multiboot header"), "{e}");
}
