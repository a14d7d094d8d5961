//! Bad values for every flag of `ipivmm run`, and bad payload files: exit
//! code 2, one error line that says what is wrong and what to use instead,
//! and no VM run (the refusal comes before any guest code executes).
//!
//! Value errors caught by clap (non-numbers, overflow, unknown choices) are
//! printed by clap as its error line plus its usage/hint lines; the
//! assertions here accept exactly that boilerplate besides the one error
//! line (see `clap_value_errors_are_one_line`, ignored until `main.rs` prints
//! clap errors on one line).
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn ipivmm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args(["run", "--repeat", "1"])
        .args(args)
        .arg("--no-tracepoints")
        .output()
        .expect("ipivmm runs")
}

/// Whether /dev/kvm can be opened (as `ipivmm` will); otherwise reports
/// the skip of `test` (the part named by `why`) through `ipivmm-testkit`.
fn kvm_present(test: &str, why: &str) -> bool {
    ipivmm_testkit::kvm_openable(test, why)
}

/// Lines clap prints around its one error line.
fn clap_boilerplate(line: &str) -> bool {
    line.starts_with("Usage: ")
        || line.starts_with("For more information, try")
        || line.trim_start().starts_with("tip: ")
}

/// Exit code 2 and exactly one error line (ipivmm's "ipivmm: error:" or
/// clap's "error:"), which contains every needle.
fn assert_refused(what: &str, o: &Output, needles: &[&str]) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{what}: exit code; stderr: {e}");
    let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("ipivmm: error:") || l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{what}: one error line expected: {e}");
    let line = errors[0];
    if line.starts_with("ipivmm: error:") {
        assert_eq!(
            lines.len(),
            1,
            "{what}: ipivmm's own errors are one line: {e}"
        );
    } else {
        let rest = lines
            .iter()
            .filter(|l| **l != line)
            .all(|l| clap_boilerplate(l));
        assert!(rest, "{what}: unexpected extra lines: {e}");
    }
    for n in needles {
        assert!(line.contains(n), "{what}: {n:?} not in {line:?}");
    }
    assert!(o.stdout.is_empty(), "{what}: no table for a refused run");
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ipivmm-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let p = temp_dir().join(name);
    std::fs::write(&p, bytes).expect("write temp file");
    p
}

/// Flags whose bad values clap or `to_config` refuse (no KVM needed).
#[test]
fn bad_values_of_every_flag_are_refused_with_the_fix() {
    let cases: &[(&[&str], &[&str])] = &[
        // Numbers: not a number, negative, overflow, empty.
        (&["--vcpus", "two"], &["'two'", "--vcpus"]),
        (&["--vcpus=-1"], &["'-1'", "--vcpus"]),
        (
            &["--vcpus", "18446744073709551616"],
            &["--vcpus", "too large"],
        ),
        (&["--vcpus="], &["--vcpus"]),
        (&["--iterations", "1k"], &["'1k'", "--iterations"]),
        (&["--iterations=-5"], &["'-5'", "--iterations"]),
        (
            &["--iterations", "99999999999999999999999"],
            &["--iterations", "too large"],
        ),
        (&["--warmup", "abc"], &["'abc'", "--warmup"]),
        (&["--warmup=-1"], &["'-1'", "--warmup"]),
        (&["--memory", "64M"], &["'64M'", "--memory"]),
        (&["--memory=-64"], &["'-64'", "--memory"]),
        (&["--timeout", "1.5"], &["'1.5'", "--timeout"]),
        (&["--timeout=-1"], &["'-1'", "--timeout"]),
        (&["--vector", "0x100"], &["'0x100' does not fit in a byte"]),
        (&["--vector", "256"], &["'256' does not fit in a byte"]),
        (&["--vector", "0xzz"], &["'0xzz' is not a number"]),
        (&["--vector=-1"], &["'-1'", "--vector"]),
        (&["--param", "abc"], &["'abc' is not a number"]),
        (&["--param", "0x"], &["'0x' is not a number"]),
        (
            &["--param", "18446744073709551616"],
            &["is not a number", "too large"],
        ),
        (
            &["--halt-poll-ns", "4294967296"],
            &["--halt-poll-ns", "4294967295"],
        ),
        (&["--halt-poll-ns", "fast"], &["'fast'", "--halt-poll-ns"]),
        // Choices: the error lists the valid ones.
        (
            &["--apic", "x3apic"],
            &["'x3apic'", "expected one of xapic, x2apic"],
        ),
        (
            &["--apic", "XAPIC"],
            &["'XAPIC'", "expected one of xapic, x2apic"],
        ),
        (
            &["--irqchip", "none"],
            &["'none'", "expected one of kernel, split, user"],
        ),
        (&["--ipi", "nmi"], &["'nmi'", "expected one of icr, pv"]),
        (
            &["--workload", "ping"],
            &[
                "'ping'",
                "pingpong, pingpong-halt, broadcast, multicast, self-ipi, flood, all-to-all",
            ],
        ),
        (
            &["--target", "sleep"],
            &["'sleep'", "expected one of spin, halt"],
        ),
        (
            &["--apicv", "off"],
            &["'off'", "expected one of host, inhibit"],
        ),
        (&["--disable-exits", "hlt,nap"], &["'nap'", "hlt", "pause"]),
        (
            &["--serial", "tty"],
            &["'tty'", "expected one of stdout, log, none"],
        ),
        // Repeats and booleans with values.
        (
            &[
                "--param", "1", "--param", "2", "--param", "3", "--param", "4", "--param", "5",
                "--param", "6", "--param", "7", "--param", "8", "--param", "9",
            ],
            &["--param given 9 times: at most 8"],
        ),
        (&["--quiet=yes"], &["--quiet"]),
        (&["--mount-tracefs=1"], &["--mount-tracefs"]),
        (
            &["--vcpus", "2", "--vcpus", "3"],
            &["--vcpus", "cannot be used multiple times"],
        ),
        (&["--bogus-flag"], &["'--bogus-flag'"]),
        // Outputs: unwritable or conflicting destinations.
        (
            &["--json", "/nonexistent/dir/out.json"],
            &[
                "cannot write --json /nonexistent/dir/out.json",
                "pick a writable directory",
            ],
        ),
        (
            &["--json", "/"],
            &[
                "cannot write --json /",
                "a directory",
                "name a regular file",
            ],
        ),
        (
            &["--csv", "/nonexistent/dir/out.csv"],
            &["cannot write --csv /nonexistent/dir/out.csv"],
        ),
        (
            &["--json", "-", "--csv", "-"],
            &["cannot both write to stdout"],
        ),
        (
            &["--plot", "/etc/hostname"],
            &["cannot write --plot /etc/hostname"],
        ),
        // Payload files that cannot be read.
        (
            &["--payload", "/nonexistent/payload.elf"],
            &["cannot read payload /nonexistent/payload.elf"],
        ),
        (&["--payload", "/"], &["payload"]),
    ];
    for (args, needles) in cases {
        let o = ipivmm(args);
        assert_refused(&args.join(" "), &o, needles);
    }
}

/// The `--pin` flag: syntax errors (clap) and CPUs that do not exist or are
/// not allowed (checked against the process's affinity before the run).
#[test]
fn bad_pin_lists_are_refused() {
    let syntax: &[(&[&str], &[&str])] = &[
        (&["--pin", "abc"], &["'abc' in --pin is not a CPU number"]),
        (&["--pin", "5-1"], &["bad CPU range '5-1'"]),
        (&["--pin", ""], &["--pin needs at least one CPU"]),
        (&["--pin", "0-99999"], &["bad CPU range"]),
        (&["--pin=-1"], &["--pin"]),
    ];
    for (args, needles) in syntax {
        assert_refused(&args.join(" "), &ipivmm(args), needles);
    }
    if !kvm_present(
        "bad_pin_lists_are_refused (host CPU part)",
        "needs /dev/kvm",
    ) {
        return;
    }
    let o = ipivmm(&["--pin", "99999,100000"]);
    assert_refused(
        "--pin 99999,100000",
        &o,
        &["--pin", "host CPU 99999", "not online or not allowed"],
    );
    let o = ipivmm(&["--pin", "0"]);
    assert_refused("--pin 0 with 2 vCPUs", &o, &["--pin", "1 CPUs for 2 vCPUs"]);
}

/// Values only the configuration check can judge (it needs KVM's vCPU
/// limit, so it runs once /dev/kvm is open).
#[test]
fn out_of_range_configurations_are_refused_with_the_fix() {
    if !kvm_present(
        "out_of_range_configurations_are_refused_with_the_fix",
        "the checks read KVM's vCPU limit from /dev/kvm",
    ) {
        return;
    }
    let cases: &[(&[&str], &[&str])] = &[
        // The configuration check judges --timeout too, after /dev/kvm.
        (
            &["--timeout", "0"],
            &["--timeout (VmConfig::timeout) must be at least 1 second"],
        ),
        (
            &["--vcpus", "0"],
            &["--vcpus 0 (VmConfig::vcpus): must be between 1 and"],
        ),
        (
            &["--vcpus", "256"],
            &["--vcpus 256 with --apic xapic (VmConfig::apic): xAPIC has 8-bit APIC IDs, so at most 255 vCPUs; use --apic x2apic"],
        ),
        (
            &["--vcpus", "100000"],
            &["--vcpus 100000 (VmConfig::vcpus): must be between 1 and"],
        ),
        (
            &["--memory", "0"],
            &["--memory 0 MiB (VmConfig::memory_bytes): must be between"],
        ),
        (
            &["--memory", "1"],
            &["--memory 1 MiB (VmConfig::memory_bytes): must be between"],
        ),
        (
            &["--memory", "99999999"],
            &["--memory 99999999 MiB (VmConfig::memory_bytes): must be between"],
        ),
        (
            &["--memory", "18446744073709551615"],
            &["--memory", "must be between"],
        ),
        (
            &["--iterations", "0"],
            &["--iterations (VmConfig::iterations) must be at least 1"],
        ),
        // Issue 20, case 19: values no run could finish with.
        (
            &["--warmup", "18446744073709551615"],
            &["--warmup 18446744073709551615 (VmConfig::warmup): at most 1000000000"],
        ),
        (
            &["--target", "halt", "--halt-settle-ns", "18446744073709551615"],
            &["--halt-settle-ns 18446744073709551615 (VmConfig::halt_settle): at most 1000000000 ns"],
        ),
        // Issue 20, case 5: each pair is two runs.
        (
            &["--observer-effect", "4294967295"],
            &["4294967295 pairs: at most 1000"],
        ),
        (
            &["--iterations", "100000000"],
            &["raise --memory (VmConfig::memory_bytes) or lower --iterations"],
        ),
        (
            &["--vector", "0x1f"],
            &["--vector 0x1f (VmConfig::ipi_vector): fixed IPIs need a vector in 0x20..=0xfe"],
        ),
        (
            &["--vector", "0xff"],
            &["--vector 0xff (VmConfig::ipi_vector): fixed IPIs need a vector in 0x20..=0xfe"],
        ),
        (&["--vector", "0"], &["--vector 0x0"]),
        (
            &["--workload", "flood", "--vcpus", "1"],
            &["needs at least 2 vCPUs: use --vcpus 2 or more"],
        ),
        (&["--ipi", "pv", "--irqchip", "user"], &["--ipi pv"]),
        (&["--kvm-device", "/nonexistent/kvm"], &["does not exist"]),
    ];
    for (args, needles) in cases {
        assert_refused(&args.join(" "), &ipivmm(args), needles);
    }
}

/// Payload files that are empty, huge, truncated, for another architecture
/// or not executables.
#[test]
fn bad_payload_files_are_refused() {
    use ipivmm_testkit::images::elf64 as minimal_elf;
    let good = minimal_elf(0x10_0000, &[0xf4; 64]);
    let mut cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        ("empty", Vec::new(), &["payload is empty"]),
        ("script", b"#!/bin/sh\n".to_vec(), &["not an ELF file"]),
        ("magic-only", b"\x7fELF".to_vec(), &["truncated"]),
        ("header-cut", good[..40].to_vec(), &["truncated"]),
        (
            "phdr-cut",
            good[..64 + 20].to_vec(),
            &["truncated: program headers"],
        ),
        (
            "code-cut",
            good[..good.len() - 32].to_vec(),
            &["points past the end of the file"],
        ),
    ];
    let mut arm = good.clone();
    arm[18] = 183;
    cases.push(("aarch64", arm, &["AArch64", "build it for x86_64"]));
    let mut i386 = good.clone();
    i386[4] = 1;
    i386[18] = 3;
    cases.push(("i386", i386, &["32-bit", "i386", "build it for x86_64"]));
    let mut big = good.clone();
    big[5] = 2;
    cases.push(("big-endian", big, &["big-endian"]));
    let mut dynamic = good.clone();
    dynamic[16] = 3;
    cases.push(("pie", dynamic, &["not ET_EXEC", "link it statically"]));
    let mut entry = good.clone();
    entry[24..32].copy_from_slice(&0x20_0000u64.to_le_bytes());
    cases.push(("entry-outside", entry, &["entry point 0x200000 is outside"]));
    // Issue 20, case 8: what only linux-loader refused (the run used to open
    // /dev/kvm and build the VM first; `--dry-run` accepted them).
    let mut wide = good.clone();
    wide[54..56].copy_from_slice(&64u16.to_le_bytes());
    wide.splice(120..120, [0u8; 8]);
    wide[64 + 8..64 + 16].copy_from_slice(&128u64.to_le_bytes());
    cases.push((
        "phentsize-64",
        wide,
        &["refused by the loader", "program header size"],
    ));
    let mut note = good.clone();
    note[56..58].copy_from_slice(&2u16.to_le_bytes());
    let mut ph = vec![0u8; 56];
    ph[0..4].copy_from_slice(&4u32.to_le_bytes());
    ph[8..16].copy_from_slice(&0x10_0000u64.to_le_bytes());
    ph[32..40].copy_from_slice(&64u64.to_le_bytes());
    note.splice(120..120, ph);
    note[64 + 8..64 + 16].copy_from_slice(&176u64.to_le_bytes());
    cases.push(("note-past-end", note, &["refused by the loader"]));
    for (name, bytes, needles) in cases {
        let p = temp_file(&format!("{name}.elf"), &bytes);
        let o = ipivmm(&["--payload", p.to_str().expect("utf-8 path")]);
        assert_refused(name, &o, needles);
        let dry = ipivmm(&["--dry-run", "--payload", p.to_str().expect("utf-8 path")]);
        assert_refused(&format!("{name} --dry-run"), &dry, needles);
    }
    // Over the size limit (sparse file).
    let p = temp_dir().join("huge.elf");
    let f = std::fs::File::create(&p).expect("create");
    f.set_len(1 << 30).expect("sparse 1 GiB");
    let o = ipivmm(&["--payload", p.to_str().expect("utf-8 path")]);
    assert_refused("huge", &o, &["over the 67108864-byte limit"]);
    let _ = std::fs::remove_file(&p);
}

/// Segments that would land on ipivmm's own guest area (boot info, page
/// tables, GDT/TSS below 1 MiB; the vCPU stacks from 8 MiB) or past RAM.
#[test]
fn payload_segments_on_reserved_guest_memory_are_refused() {
    use ipivmm_testkit::images::elf64 as minimal_elf;
    let places: &[(&str, u64, usize)] = &[
        ("zero", 0, 16),
        // ipivmm's guest layout (vmm/src/arch/layout.rs, docs/payload-sdk.md):
        ("boot-info", 0x1000, 16),
        ("page-tables", 0x1_0000, 16),
        ("gdt", 0x2_0000, 16),
        ("straddles-1MiB", 0x10_0000 - 8, 16),
        ("onto-stacks", 0x80_0000 - 8, 16),
        ("stacks", 0x80_0000, 16),
        ("past-ram", 0x1_0000_0000, 16),
        ("top-of-address-space", u64::MAX - 7, 16),
    ];
    for (name, addr, len) in places {
        let p = temp_file(
            &format!("seg-{name}.elf"),
            &minimal_elf(*addr, &vec![0xf4; *len]),
        );
        let o = ipivmm(&["--payload", p.to_str().expect("utf-8 path")]);
        assert_refused(
            name,
            &o,
            &[
                "outside guest range 0x100000..0x800000",
                "link it at 0x100000",
            ],
        );
    }
    // A .bss (p_memsz > p_filesz) that runs onto the stacks.
    let mut bss = minimal_elf(0x10_0000, &[0xf4; 16]);
    bss[64 + 40..64 + 48].copy_from_slice(&(8u64 << 20).to_le_bytes());
    let p = temp_file("bss-onto-stacks.elf", &bss);
    let o = ipivmm(&["--payload", p.to_str().expect("utf-8 path")]);
    assert_refused("bss", &o, &["outside guest range 0x100000..0x800000"]);
}

/// An unwritable `--json` is refused before the VM runs: with a workload
/// that would take minutes, the refusal still comes at once.
#[test]
fn unwritable_json_is_refused_before_the_run_starts() {
    let started = Instant::now();
    let o = ipivmm(&[
        "--iterations",
        "2000000",
        "--memory",
        "256",
        "--json",
        "/nonexistent/dir/out.json",
    ]);
    let took = started.elapsed();
    assert_refused(
        "--json /nonexistent/dir/out.json",
        &o,
        &["cannot write --json"],
    );
    assert!(
        took < ipivmm_testkit::scaled(Duration::from_secs(5)),
        "refusal took {took:?}: the run started first"
    );
}

/// clap's own value errors are one line naming the flag, and "-1" is read as
/// a bad value of the flag, not as an unknown flag.
#[test]
fn clap_value_errors_are_one_line() {
    for args in [&["--vcpus", "two"][..], &["--vcpus", "-1"][..]] {
        let o = ipivmm(args);
        let e = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{e}");
        assert!(
            lines[0].starts_with("ipivmm: error:") && lines[0].contains("--vcpus"),
            "{e}"
        );
    }
}

/// Issue 48: as a user who cannot open /dev/kvm, every test here passes
/// or skips visibly (none fails on the KVM error).
#[test]
fn without_kvm_access_the_tests_here_skip() {
    ipivmm_testkit::assert_kvm_tests_skip_as_nobody("without_kvm_access_the_tests_here_skip");
}
