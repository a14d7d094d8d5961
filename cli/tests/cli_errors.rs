//! Bad input on the command line: one line naming the cause and the fix,
//! exit code 2, before any VM is built.
use ipivmm_testkit::Need;
use std::process::{Command, Output};

/// Whether /dev/kvm can be opened (the vCPU limit is read from it, as a
/// non-root user outside the kvm group cannot); otherwise reports the skip
/// of `test`.
fn kvm_present(test: &str) -> bool {
    ipivmm_testkit::kvm_openable(test, "the vCPU limit is read from /dev/kvm")
}

fn ipivmm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args(args)
        .output()
        .expect("ipivmm runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The error is one line that starts with "ipivmm: error:" and contains `needle`.
fn assert_one_line_error(o: &Output, needle: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {e}");
    let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected, got: {e}");
    assert!(lines[0].starts_with("ipivmm: error:"), "{e}");
    assert!(lines[0].contains(needle), "{needle:?} not in {e}");
}

fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ipivmm-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn missing_kvm_device_names_the_fix() {
    let o = ipivmm(&["run", "--kvm-device", "/nonexistent/kvm"]);
    assert_one_line_error(&o, "does not exist; load the kvm module");
}

#[test]
fn kvm_device_without_permission_names_the_fix() {
    // Needs root to drop to an unprivileged user; /dev/kvm must be root-only.
    let is_root = ipivmm_testkit::is_root();
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    let meta = std::fs::metadata("/dev/kvm");
    let root_only = meta.as_ref().is_ok_and(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode() & 0o006 == 0
    });
    if !is_root || !setpriv.exists() || !root_only {
        ipivmm_testkit::skip(
            "kvm_device_without_permission_names_the_fix",
            Need::Setup,
            "needs root, /usr/bin/setpriv and a root-only /dev/kvm",
        );
        return;
    }
    let o = Command::new(setpriv)
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_ipivmm"),
            "run",
        ])
        .output()
        .expect("setpriv runs");
    // The hint says what this host has (owner, group, mode), not a `kvm`
    // group it may not have.
    assert_one_line_error(&o, "permission denied; /dev/kvm is ");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(", mode 0"), "{err}");
}

#[test]
fn zero_vcpus_is_refused() {
    if !kvm_present("zero_vcpus_is_refused") {
        return;
    }
    assert_one_line_error(
        &ipivmm(&["run", "--vcpus", "0"]),
        "--vcpus 0 (VmConfig::vcpus): must be between 1 and",
    );
}

#[test]
fn too_many_vcpus_is_refused() {
    if !kvm_present("too_many_vcpus_is_refused") {
        return;
    }
    assert_one_line_error(
        &ipivmm(&["run", "--vcpus", "100000"]),
        "--vcpus 100000 (VmConfig::vcpus): must be between 1 and",
    );
}

#[test]
fn payload_that_is_not_an_elf_is_refused() {
    let p = temp_file("not-elf", b"#!/bin/sh\necho hi\n");
    let o = ipivmm(&["run", "--payload", p.to_str().unwrap()]);
    assert_one_line_error(&o, "not an ELF file");
}

#[test]
fn empty_payload_is_refused() {
    let p = temp_file("empty", b"");
    assert_one_line_error(
        &ipivmm(&["run", "--payload", p.to_str().unwrap()]),
        "payload is empty",
    );
}

#[test]
fn missing_payload_file_is_refused() {
    let o = ipivmm(&["run", "--payload", "/nonexistent/payload.elf"]);
    assert_one_line_error(&o, "cannot read payload /nonexistent/payload.elf");
}

#[test]
fn payload_outside_guest_range_is_refused() {
    // An ELF linked at 4 KiB would overwrite ipivmm's page tables.
    let elf = ipivmm_testkit::images::elf64(0x1000, &[0xf4]);
    let p = temp_file("low.elf", &elf);
    let o = ipivmm(&["run", "--payload", p.to_str().unwrap()]);
    assert_one_line_error(&o, "outside guest range 0x100000..0x800000");
}

#[test]
fn oversized_payload_is_refused() {
    let dir = std::env::temp_dir().join(format!("ipivmm-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("huge.elf");
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(65 << 20).unwrap(); // sparse
    let o = ipivmm(&["run", "--payload", p.to_str().unwrap()]);
    assert_one_line_error(&o, "over the 67108864-byte limit");
}

#[test]
fn wrong_architecture_elf_is_refused() {
    let mut elf = ipivmm_testkit::images::elf64(0x10_0000, &[0xf4]);
    elf[18] = 183; // EM_AARCH64
    let p = temp_file("arm.elf", &elf);
    assert_one_line_error(
        &ipivmm(&["run", "--payload", p.to_str().unwrap()]),
        "AArch64",
    );
}

#[test]
fn unwritable_json_path_is_refused_before_the_run() {
    let o = ipivmm(&["run", "--json", "/nonexistent/dir/out.json"]);
    assert_one_line_error(&o, "cannot write --json /nonexistent/dir/out.json");
}

#[test]
fn bad_choice_lists_the_valid_ones() {
    let o = ipivmm(&["run", "--apic", "x3apic"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("expected one of xapic, x2apic"),
        "{}",
        stderr(&o)
    );
    let o = ipivmm(&["run", "--workload", "nope"]);
    assert!(
        stderr(&o).contains("pingpong, pingpong-halt, broadcast"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn help_explains_every_run_flag() {
    let o = ipivmm(&["run", "--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--vcpus",
        "--apic",
        "--workload",
        "--iterations",
        "--timeout",
        "--payload",
        "--json",
        "--target",
    ] {
        assert!(out.contains(flag), "{flag} missing from --help");
    }
}

/// Phase 0 "idle" begin and end through the control port, then `jmp .`
/// (assembled from `lea msg(%rip),%rbx; movl $MAGIC,(%rbx); ...; outl; 1: jmp 1b`).
const PHASE_THEN_HANG: &[u8] = &[
    0x48, 0x8d, 0x1d, 0x79, 0x00, 0x00, 0x00, 0xc7, 0x03, 0x49, 0x50, 0x49, 0x4d, 0x66, 0xc7, 0x43,
    0x04, 0x01, 0x00, 0x89, 0x73, 0x08, 0x66, 0xc7, 0x43, 0x06, 0x02, 0x00, 0x48, 0x8d, 0x05, 0x1e,
    0x00, 0x00, 0x00, 0x48, 0x89, 0x43, 0x10, 0x48, 0xc7, 0x43, 0x18, 0x04, 0x00, 0x00, 0x00, 0x89,
    0xd8, 0x66, 0xba, 0xe0, 0x0c, 0xef, 0x66, 0xc7, 0x43, 0x06, 0x03, 0x00, 0x89, 0xd8, 0xef, 0xeb,
    0xfe, b'i', b'd', b'l', b'e',
];

#[test]
fn timeout_keeps_finished_phases_in_the_json() {
    if !ipivmm_testkit::kvm_available("timeout_keeps_finished_phases_in_the_json") {
        return;
    }
    // The message buffer sits 128-byte aligned after the code: pad to 0x80 + 128.
    let mut code = PHASE_THEN_HANG.to_vec();
    code.resize(0x100, 0);
    let elf = ipivmm_testkit::images::elf64(0x10_0000, &code);
    let p = temp_file("phase-then-hang.elf", &elf);
    let json = p.with_extension("json");
    let o = ipivmm(&[
        "run",
        "--payload",
        p.to_str().unwrap(),
        "--vcpus",
        "1",
        "--timeout",
        "1",
        "--json",
        json.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("timed out after 1 s, stopped vcpu0 at rip="),
        "{}",
        stderr(&o)
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let run = &doc["runs"][0];
    assert_eq!(run["status"]["state"], "timed_out");
    // One vCPU: the snippet's single message buffer is not per-vCPU.
    for v in 0..1 {
        assert_eq!(
            run["vcpus"][v]["phases"][0]["name"], "idle",
            "vcpu{v} kept its finished phase"
        );
        assert_eq!(run["vcpus"][v]["end"]["state"], "stopped");
    }
}

/// A host switch of a parameter no module has is refused on every host
/// (kvm_pvm, the other vendor, or kvm_amd without it), before anything is
/// unloaded: one line, exit 2.
#[test]
fn host_set_of_a_missing_parameter_is_refused() {
    let o = ipivmm(&["host", "--set", "kvm_amd.no_such_param=1"]);
    assert_one_line_error(&o, "kvm");
    let o = ipivmm(&["host", "--set", "kvm_amd.avic"]);
    assert_one_line_error(&o, "kvm_amd.avic=1");
}

#[test]
fn sweep_host_param_is_checked_before_any_run() {
    let o = ipivmm(&[
        "sweep",
        "--host-param",
        "kvm_amd.no_such_param=0,1",
        "--workload",
        "pingpong",
    ]);
    assert_one_line_error(&o, "kvm");
    let o = ipivmm(&["sweep", "--host-param", "kvm_amd.avic=1,Y"]);
    assert_one_line_error(&o, "twice");
}

#[test]
fn sweep_vcpu_lists_and_ranges_are_checked_like_run() {
    for (bad, needle) in [
        ("8..2", "the first count must not exceed the last"),
        ("2,x", "'x' is not a vCPU count"),
        ("0", "a vCPU count must be at least 1"),
    ] {
        assert_one_line_error(&ipivmm(&["sweep", "--vcpus", bad]), needle);
    }
    if !kvm_present("sweep_vcpu_lists_and_ranges_are_checked_like_run") {
        return;
    }
    // Beyond KVM's limit: refused before any run, as `run` refuses it.
    assert_one_line_error(
        &ipivmm(&["sweep", "--vcpus", "2,100000"]),
        "--vcpus 100000 (VmConfig::vcpus): must be between 1 and",
    );
    // xAPIC alone cannot go past 255: refused with the fix.
    assert_one_line_error(
        &ipivmm(&["sweep", "--apic", "xapic", "--vcpus", "2..256"]),
        "use --apic x2apic",
    );
}

#[test]
fn xapic_beyond_255_vcpus_is_refused_with_the_fix() {
    if !kvm_present("xapic_beyond_255_vcpus_is_refused_with_the_fix") {
        return;
    }
    assert_one_line_error(
        &ipivmm(&["run", "--vcpus", "300", "--apic", "xapic"]),
        "xAPIC has 8-bit APIC IDs, so at most 255 vCPUs; use --apic x2apic",
    );
}

/// Issue 48: as a user who cannot open /dev/kvm, every test here passes
/// or skips visibly (none fails on the KVM error).
#[test]
fn without_kvm_access_the_tests_here_skip() {
    ipivmm_testkit::assert_kvm_tests_skip_as_nobody("without_kvm_access_the_tests_here_skip");
}
