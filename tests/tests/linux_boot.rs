//! A Linux guest's machine (`--kernel`), booted for real with a stub
//! kernel: a bzImage whose 64-bit entry reads what the boot protocol
//! promises it (the zero page in `rsi`: the e820 map, the command line, the
//! RSDP, the initrd), prints it on COM1 and powers off through the ACPI
//! sleep registers. A real kernel does not boot on kvm_pvm (the run
//! refuses it there); this stub does, so the path from `--kernel` to a
//! completed run is tested here, and on kvm_amd in the lab.
use ipivmm::config::{PayloadSource, VmConfig};
use ipivmm::linux::LinuxGuest;
use ipivmm::run::{run, RunOptions};
use ipivmm_analysis::results::{RunStatus, VcpuEnd};
use ipivmm_testkit::images::bzimage;
use ipivmm_tests::kvm_available;
use std::path::PathBuf;
use std::time::Duration;

/// The stub's 64-bit entry (at +0x200 of the protected-mode kernel):
/// ```text
/// mov dx, 0x3f8
/// mov al, [rsi+0x1e8]   ; e820_entries
/// add al, '0'
/// out dx, al
/// mov edi, [rsi+0x228]  ; cmd_line_ptr
/// mov al, [rdi]
/// out dx, al
/// mov rdi, [rsi+0x70]   ; acpi_rsdp_addr
/// mov al, [rdi]
/// out dx, al
/// mov edi, [rsi+0x218]  ; ramdisk_image
/// mov al, [rdi]
/// out dx, al
/// mov dx, 0x600         ; the ACPI sleep control register
/// mov al, 0x34          ; SLP_EN | SLP_TYP 5 (\_S5_)
/// out dx, al
/// hlt
/// jmp .-1
/// ```
const ENTRY: &[u8] = &[
    0x66, 0xba, 0xf8, 0x03, 0x8a, 0x86, 0xe8, 0x01, 0x00, 0x00, 0x04, 0x30, 0xee, 0x8b, 0xbe, 0x28,
    0x02, 0x00, 0x00, 0x8a, 0x07, 0xee, 0x48, 0x8b, 0x7e, 0x70, 0x8a, 0x07, 0xee, 0x8b, 0xbe, 0x18,
    0x02, 0x00, 0x00, 0x8a, 0x07, 0xee, 0x66, 0xba, 0x00, 0x06, 0xb0, 0x34, 0xee, 0xf4, 0xeb, 0xfd,
];

/// The stub's files in a directory of `test`'s own (the tests run in
/// parallel: one writing the kernel while another reads it raced).
fn stub_files(test: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ipivmm-linux-boot-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut kernel = vec![0xf4u8; 0x200];
    kernel.extend_from_slice(ENTRY);
    let k = dir.join("bzImage");
    std::fs::write(&k, bzimage(&kernel, "6.1.0-stub")).unwrap();
    let i = dir.join("initrd");
    std::fs::write(&i, b"Initrd of the stub").unwrap();
    (k, i)
}

fn stub_config(test: &str, vcpus: usize) -> VmConfig {
    let (kernel, initrd) = stub_files(test);
    VmConfig {
        vcpus,
        memory_bytes: 64 << 20,
        timeout: Duration::from_secs(30),
        tracepoints: false,
        payload: PayloadSource::Linux(LinuxGuest {
            initrd: Some(initrd),
            allow_software_kvm: true,
            ..LinuxGuest::new(kernel)
        }),
        ..Default::default()
    }
}

#[test]
fn a_stub_kernel_reads_the_boot_protocol_and_powers_off() {
    if !kvm_available("a_stub_kernel_reads_the_boot_protocol_and_powers_off") {
        return;
    }
    let r = run(&stub_config("boot", 2), RunOptions::default()).expect("the run starts");
    assert_eq!(r.status, RunStatus::Completed, "{}", r.status.text());
    // Three e820 entries, the command line ("console=..."), the RSDP
    // ("RSD PTR "), the initrd ("Initrd..."): every pointer of the zero page
    // led where it should.
    assert_eq!(r.serial_tail, "3cRI");
    // vCPU 0 powered off; vCPU 1 never left its wait for INIT (the stub
    // sends none) and ends done with it, not stopped.
    for v in &r.vcpus {
        match &v.end {
            Some(VcpuEnd::Done { status: 0, message }) => {
                assert!(
                    message.contains("powered off"),
                    "vcpu{}: {message}",
                    v.index
                )
            }
            other => panic!("vcpu{} ended {other:?}", v.index),
        }
    }
    assert_eq!(r.mode.payload.as_deref(), Some("linux:bzImage"));
}

#[test]
fn without_the_stub_flag_kvm_pvm_refuses_a_kernel_before_booting() {
    if !kvm_available("without_the_stub_flag_kvm_pvm_refuses_a_kernel_before_booting") {
        return;
    }
    let mut c = stub_config("refused", 1);
    let PayloadSource::Linux(g) = &mut c.payload else {
        unreachable!()
    };
    g.allow_software_kvm = false;
    let software = matches!(
        ipivmm::kvm_available().map(|k| k.backend),
        Ok(ipivmm::host::KvmBackend::KvmPvm)
    );
    match run(&c, RunOptions::default()) {
        Err(e) if software => {
            assert!(e.host_cannot_run(), "{e}");
            assert!(e.to_string().contains("kvm_pvm"), "{e}");
        }
        Ok(r) if !software => assert_eq!(r.status, RunStatus::Completed, "{}", r.status.text()),
        other => panic!("software KVM {software}: {:?}", other.map(|r| r.status)),
    }
}
