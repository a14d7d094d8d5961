//! Issue 49: Linux workloads in `sweep`, from the command line. A
//! `linux:NAME` workload without `--kernel` is one line naming the flag; with
//! a (stub) bzImage the dry run plans the 2 rows of `--apic xapic,x2apic`,
//! says what a Linux row costs, and where Linux does not boot (kvm_pvm)
//! lists both as skips naming the lab command and exits 2 (4 with
//! expectations: "nothing ran"), never 0.
use std::process::{Command, Output};

fn sweep(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .arg("sweep")
        .args(args)
        .output()
        .expect("ipivmm runs")
}

#[test]
fn a_linux_workload_without_a_kernel_is_one_line_naming_the_flag() {
    let o = sweep(&["--workload", "linux:ipi-broadcast", "--dry-run"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("ipivmm: error: --workload linux:ipi-broadcast: a Linux guest's workload needs --kernel BZIMAGE"),
        "{e}"
    );
}

#[test]
fn the_dry_run_plans_two_linux_rows_and_says_what_they_cost() {
    let test = "the_dry_run_plans_two_linux_rows_and_says_what_they_cost";
    if !ipivmm_testkit::kvm_openable(test, "the dry run opens /dev/kvm") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ipivmm-linux-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (kernel, initrd) = (dir.join("bzImage"), dir.join("initrd"));
    std::fs::write(&kernel, ipivmm_testkit::images::bzimage(&[0xf4; 64], "6.1")).unwrap();
    std::fs::write(&initrd, b"not a cpio: only its size is read").unwrap();
    let flags = [
        "--kernel",
        kernel.to_str().unwrap(),
        "--initrd",
        initrd.to_str().unwrap(),
        "--workload",
        "linux:ipi-broadcast",
        "--apic",
        "xapic,x2apic",
        "--dry-run",
    ];
    let o = sweep(&flags);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(out.contains("a Linux row ("), "{out}");
    assert!(out.contains("256 MiB of guest RAM per VM"), "{out}");
    let software = ipivmm_host::facts::probe()
        .is_ok_and(|h| h.backend == ipivmm_host::facts::KvmBackend::KvmPvm);
    if software {
        assert!(out.contains("0 rows x 5 repeats, 2 skipped"), "{out}");
        assert!(out.contains("cargo xtask lab linux"), "{out}");
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("nothing to run: all 2 combinations are skipped")
                && err.contains("cargo xtask lab linux"),
            "{err}"
        );
        let mut gated = flags.to_vec();
        gated.extend(["--expect", "operations > 0"]);
        let o = sweep(&gated);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{err}");
        assert!(err.contains("nothing ran: nothing to run"), "{err}");
    } else {
        assert!(out.contains("2 rows x 5 repeats"), "{out}");
        assert!(
            out.contains("  run   linux:ipi-broadcast 2v kernel/xapic/icr"),
            "{out}"
        );
        assert!(
            out.contains("  run   linux:ipi-broadcast 2v kernel/x2apic/icr"),
            "{out}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
