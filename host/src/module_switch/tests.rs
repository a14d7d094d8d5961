//! Tests of the module switch against a fake module tree.

use super::*;
use vmm_sys_util::tempdir::TempDir;

/// A pid that cannot exist (above the kernel's PID_MAX_LIMIT, 4194304).
const DEAD_PID: u32 = 0x7fff_fff0;

const AMD: KvmBackend = KvmBackend::KvmAmd;

struct Fixture {
    dir: TempDir,
    fake: Arc<FakeModprobe>,
    tree: ModuleTree,
}

impl Fixture {
    fn sys(&self) -> PathBuf {
        self.dir.as_path().join("sys/module")
    }

    fn param(&self, module: &str, p: &str) -> String {
        let path = self.sys().join(module).join("parameters").join(p);
        std::fs::read_to_string(path).unwrap().trim().to_string()
    }

    fn set_param(&self, module: &str, p: &str, v: &str) {
        let path = self.sys().join(module).join("parameters").join(p);
        std::fs::write(path, format!("{v}\n")).unwrap();
    }

    fn state(&self) -> State {
        read_state(&self.tree.state_file)
            .unwrap()
            .expect("state file")
    }

    fn rewrite_state(&self, f: impl FnOnce(&mut State)) {
        let mut s = self.state();
        f(&mut s);
        write_state(&self.tree.state_file, &s).unwrap();
    }
}

/// A kvm_amd host: kvm (a module kvm_amd depends on) and kvm_amd, whose
/// "CPU" turns `avic` off when `clamp_avic` (as under QEMU TCG).
fn amd(clamp_avic: bool) -> Fixture {
    let dir = TempDir::new().unwrap();
    let sys = dir.as_path().join("sys/module");
    let mut fake = FakeModprobe::new(&sys)
        .with_module("kvm", &[("halt_poll_ns", "200000")])
        .unwrap()
        .with_module(
            "kvm_amd",
            &[
                ("avic", "N"),
                ("force_avic", "N"),
                ("nested", "1"),
                ("npt", "Y"),
                ("pause_filter_count", "3000"),
            ],
        )
        .unwrap()
        .with_dependency("kvm_amd", "kvm")
        .unwrap();
    if clamp_avic {
        fake = fake.with_clamp("kvm_amd", "avic", "N");
    }
    let fake = Arc::new(fake);
    let debugfs = dir.as_path().join("debug/kvm");
    std::fs::create_dir_all(&debugfs).unwrap();
    let tree = ModuleTree {
        sys_module: sys,
        debugfs_kvm: debugfs,
        state_file: dir.as_path().join("run/ipivmm/module-switch.json"),
        euid: 0,
        runner: fake.clone(),
    };
    Fixture { dir, fake, tree }
}

fn set(list: &str) -> Vec<ModuleSetting> {
    parse_settings(list).unwrap()
}

fn one_line(e: &dyn std::error::Error) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "multi-line message: {s}");
    s
}

// --- parsing -------------------------------------------------------------

#[test]
fn parses_and_normalises_settings() {
    let s = set(" kvm-intel.enable_apicv=N , kvm_intel.enable-ipiv=0,kvm_amd.avic=1");
    assert_eq!(
        s,
        vec![
            ModuleSetting {
                module: "kvm_intel".into(),
                param: "enable_apicv".into(),
                value: "N".into()
            },
            ModuleSetting {
                module: "kvm_intel".into(),
                param: "enable_ipiv".into(),
                value: "0".into()
            },
            ModuleSetting {
                module: "kvm_amd".into(),
                param: "avic".into(),
                value: "1".into()
            },
        ]
    );
    assert_eq!(s[2].to_string(), "kvm_amd.avic=1");
}

#[test]
fn refuses_empty_and_garbled_settings() {
    use ParseError::*;
    assert_eq!(parse_settings(""), Err(Empty));
    assert_eq!(parse_settings("  "), Err(Empty));
    assert!(matches!(
        parse_settings("kvm_amd.avic=1,,kvm_amd.nested=0"),
        Err(EmptyItem { index: 2, .. })
    ));
    assert!(matches!(
        parse_settings("kvm_amd.avic=1,"),
        Err(EmptyItem { index: 2, .. })
    ));
    for garbled in ["kvm_amd.avic", "avic=1", "=1", "kvm_amd"] {
        assert!(
            matches!(parse_settings(garbled), Err(Garbled { .. })),
            "{garbled}"
        );
    }
    for bad_name in [
        "kvm amd.avic=1",
        "kvm_amd.av!c=1",
        ".avic=1",
        "kvm_amd.=1",
        "kvm_amd.a.b=1",
    ] {
        assert!(
            matches!(parse_settings(bad_name), Err(BadName { .. })),
            "{bad_name}"
        );
    }
    for bad_value in [
        "kvm_amd.avic=",
        "kvm_amd.avic=1 2",
        "kvm_amd.avic=\"1\"",
        "kvm_amd.avic=a=b",
    ] {
        assert!(
            matches!(parse_settings(bad_value), Err(BadValue { .. })),
            "{bad_value}"
        );
    }
    let long = format!("kvm_amd.avic={}", "1".repeat(MAX_VALUE_LEN + 1));
    assert!(matches!(parse_settings(&long), Err(BadValue { .. })));
    let dup = parse_settings("kvm_amd.avic=1,kvm-amd.avic=0").unwrap_err();
    assert_eq!(
        dup,
        Duplicate {
            key: "kvm_amd.avic".into()
        }
    );
    assert!(one_line(&dup).contains("keep one value"));
    assert!(one_line(&parse_settings("avic=1").unwrap_err()).contains("e.g. kvm_amd.avic=1"));
}

#[test]
fn parses_sweep_dimension_values() {
    let v = parse_param_values("kvm-amd.avic=0,1").unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(
        (v[0].to_string(), v[1].to_string()),
        ("kvm_amd.avic=0".into(), "kvm_amd.avic=1".into())
    );
    assert!(matches!(
        parse_param_values("kvm_amd.avic=1,Y"),
        Err(ParseError::Duplicate { .. })
    ));
    assert!(matches!(
        parse_param_values("kvm_amd.avic=0,,1"),
        Err(ParseError::EmptyItem { index: 2, .. })
    ));
    assert!(matches!(
        parse_param_values("kvm_amd.avic"),
        Err(ParseError::Garbled { .. })
    ));
    assert_eq!(parse_param_values(""), Err(ParseError::Empty));
}

#[test]
fn compares_values_as_the_kernel_parses_them() {
    for (a, b) in [
        ("1", "Y"),
        ("y", "Y"),
        ("on", "Y"),
        ("true", "Y"),
        ("off", "N"),
        ("0", "N"),
        ("n", "N"),
        ("200000", "200000"),
        ("0x10", "16"),
        ("010", "8"),
        ("-1", "-1"),
        ("auto", "auto"),
    ] {
        assert!(param_values_equal(a, b), "{a} vs {b}");
    }
    for (a, b) in [
        ("1", "N"),
        ("2", "Y"),
        ("010", "10"),
        ("0x", "0"),
        ("auto", "cond"),
        ("Y", ""),
    ] {
        assert!(!param_values_equal(a, b), "{a} vs {b}");
    }
    assert_eq!(parse_kernel_int("0x-5"), None);
    assert_eq!(parse_kernel_int("--5"), None);
    assert_eq!(parse_kernel_int("09"), None);
    assert_eq!(parse_kernel_bool("maybe"), None);
}

// --- guards ----------------------------------------------------------------

#[test]
fn refuses_without_root() {
    let mut f = amd(false);
    f.tree.euid = 1000;
    let e = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap_err();
    assert!(matches!(e, SwitchError::NotRoot { euid: 1000 }), "{e}");
    assert!(one_line(&e).contains("sudo"));
    assert!(f.fake.calls().is_empty());
    assert!(!f.tree.state_file.exists());
}

#[test]
fn refuses_pvm_and_non_vendor_modules() {
    let f = amd(false);
    let e = f
        .tree
        .apply(&KvmBackend::KvmPvm, &set("kvm_amd.avic=1"))
        .unwrap_err();
    assert!(matches!(e, SwitchError::PvmBackend), "{e}");
    let e = f.tree.apply(&AMD, &set("kvm.halt_poll_ns=0")).unwrap_err();
    assert!(matches!(e, SwitchError::NotVendorModule { .. }), "{e}");
    let e = f.tree.apply(&AMD, &set("kvm_pvm.force=1")).unwrap_err();
    assert!(matches!(e, SwitchError::NotVendorModule { .. }), "{e}");
    let e = f
        .tree
        .apply(&AMD, &set("kvm_intel.enable_ipiv=0"))
        .unwrap_err();
    assert!(
        matches!(&e, SwitchError::WrongVendor { backend, .. } if backend == "kvm_amd"),
        "{e}"
    );
    let e = f
        .tree
        .apply(&KvmBackend::None, &set("kvm_amd.avic=1"))
        .unwrap_err();
    assert!(matches!(e, SwitchError::NoVendorBackend { .. }), "{e}");
    let e = f
        .tree
        .apply(&AMD, &set("kvm_amd.avic=1,kvm_intel.enable_apicv=0"))
        .unwrap_err();
    assert!(matches!(e, SwitchError::MixedModules { .. }), "{e}");
    let e = f.tree.apply(&AMD, &[]).unwrap_err();
    assert!(matches!(e, SwitchError::Settings(ParseError::Empty)), "{e}");
    one_line(&e);
    assert!(f.fake.calls().is_empty());
}

#[test]
fn refuses_unknown_parameter_listing_those_that_exist() {
    let f = amd(false);
    let e = f
        .tree
        .apply(&AMD, &set("kvm_amd.enable_ipiv=0"))
        .unwrap_err();
    match &e {
        SwitchError::UnknownParam {
            param, available, ..
        } => {
            assert_eq!(param, "enable_ipiv");
            assert_eq!(
                available,
                "avic, force_avic, nested, npt, pause_filter_count"
            );
        }
        other => panic!("unexpected {other}"),
    }
    assert!(one_line(&e).contains("kernel version"));
    assert!(f.fake.calls().is_empty());
}

#[test]
fn refuses_a_module_in_use() {
    let f = amd(false);
    f.fake.set_refcnt("kvm_amd", 2).unwrap();
    let e = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap_err();
    assert!(
        matches!(&e, SwitchError::InUse { module, refcnt: 2 } if module == "kvm_amd"),
        "{e}"
    );
    assert!(one_line(&e).contains("/dev/kvm"));
    assert!(f.fake.calls().is_empty());
    assert!(!f.tree.state_file.exists());
    assert_eq!(f.param("kvm_amd", "avic"), "N");
}

#[test]
fn refuses_when_debugfs_lists_a_vm() {
    let f = amd(false);
    // Global stats files and odd names are not VMs.
    std::fs::write(f.tree.debugfs_kvm.join("halt_exits"), "0\n").unwrap();
    std::fs::create_dir(f.tree.debugfs_kvm.join("not-a-vm")).unwrap();
    f.tree.check(&AMD, &set("kvm_amd.avic=1")).unwrap();
    std::fs::create_dir(f.tree.debugfs_kvm.join("4242-11")).unwrap();
    let e = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap_err();
    match &e {
        SwitchError::VmsRunning { vms, .. } => {
            assert!(vms.contains("pid 4242") && vms.ends_with("fd 11"), "{vms}")
        }
        other => panic!("unexpected {other}"),
    }
    one_line(&e);
    assert!(f.fake.calls().is_empty());
}

#[test]
fn says_the_vm_check_was_partial_without_debugfs() {
    let mut f = amd(false);
    let full = f.tree.check(&AMD, &set("kvm_amd.avic=1")).unwrap();
    assert_eq!(full.vm_check, VmCheck::Full(f.tree.debugfs_kvm.clone()));
    assert_eq!(full.current["avic"], "N");
    f.tree.debugfs_kvm = f.dir.as_path().join("no-debugfs/kvm");
    let a = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap();
    match &a.vm_check {
        VmCheck::Partial(why) => assert!(why.contains("kvm_amd's refcnt") && why.contains("mount")),
        other => panic!("unexpected {other:?}"),
    }
    // ...and still refuses through the refcnt.
    f.tree.restore().unwrap();
    f.fake.set_refcnt("kvm_amd", 1).unwrap();
    let e = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap_err();
    assert!(matches!(e, SwitchError::InUse { refcnt: 1, .. }), "{e}");
}

#[test]
fn refuses_built_in_and_missing_modules() {
    let f = amd(false);
    // Built in: parameters/ but no initstate or refcnt.
    let intel = f.sys().join("kvm_intel/parameters");
    std::fs::create_dir_all(&intel).unwrap();
    std::fs::write(intel.join("enable_ipiv"), "Y\n").unwrap();
    let e = f
        .tree
        .apply(&KvmBackend::KvmIntel, &set("kvm_intel.enable_ipiv=0"))
        .unwrap_err();
    assert!(matches!(e, SwitchError::BuiltIn { .. }), "{e}");
    assert!(one_line(&e).contains("kernel command line"));
    std::fs::remove_dir_all(f.sys().join("kvm_amd")).unwrap();
    let e = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap_err();
    assert!(matches!(e, SwitchError::NotLoaded { .. }), "{e}");
    assert!(one_line(&e).contains("modprobe kvm_amd"));
    assert!(f.fake.calls().is_empty());
}

// --- apply -------------------------------------------------------------

#[test]
fn apply_reports_values_the_kernel_refused() {
    let f = amd(true);
    let a = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap();
    assert!(a.reloaded);
    assert_eq!(
        f.fake.calls(),
        ["modprobe -r kvm_amd", "modprobe kvm_amd avic=1"]
    );
    assert_eq!(a.read_back["avic"], "N");
    let m = a.mismatches();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].key, "kvm_amd.avic");
    assert_eq!(m[0].read_back.as_deref(), Some("N"));
    assert!(
        m[0].hint.contains("no AVIC under QEMU TCG"),
        "{}",
        m[0].hint
    );
    assert!(m[0]
        .to_string()
        .starts_with("kvm_amd.avic: asked 1, kernel reports N ("));
    // The state file was written with everything needed to restore.
    let s = f.state();
    assert_eq!(a.state_file.as_deref(), Some(f.tree.state_file.as_path()));
    assert_eq!(s.module, "kvm_amd");
    assert_eq!(s.original["avic"], "N");
    assert_eq!(s.original.len(), 5);
    assert_eq!(s.settings, set("kvm_amd.avic=1"));
    assert_eq!(s.pid, std::process::id());
    assert!(s.is_ours() && s.timestamp > 0);
}

#[test]
fn apply_normalises_bools_and_reports_side_effects() {
    let f = amd(false);
    // Loaded by hand with nested=0; halt_poll_ns changed at run time.
    f.set_param("kvm_amd", "nested", "0");
    f.set_param("kvm", "halt_poll_ns", "0");
    let a = f
        .tree
        .apply(&AMD, &set("kvm_amd.avic=on,kvm_amd.force_avic=1"))
        .unwrap();
    assert_eq!(
        (f.param("kvm_amd", "avic"), f.param("kvm_amd", "force_avic")),
        ("Y".into(), "Y".into())
    );
    assert!(a.mismatches().is_empty(), "{:?}", a.mismatches());
    let side = a.side_effects();
    assert_eq!(side.len(), 1, "{side:?}");
    assert_eq!(side["nested"], ("0".to_string(), "1".to_string()));
    assert_eq!(
        a.kvm_changed["halt_poll_ns"],
        ("0".to_string(), "200000".to_string())
    );
    assert_eq!(a.state_file, Some(f.tree.state_file.clone()));
}

#[test]
fn apply_leaves_the_module_alone_when_nothing_changes() {
    let f = amd(false);
    let mut sw = f
        .tree
        .switch(&AMD, &set("kvm_amd.avic=0,kvm_amd.nested=on"))
        .unwrap();
    assert!(!sw.applied().reloaded && sw.is_restored());
    assert_eq!(sw.applied().state_file, None);
    assert!(sw.restore().unwrap().was_noop());
    drop(sw);
    assert!(f.fake.calls().is_empty());
    assert!(!f.tree.state_file.exists());
}

#[test]
fn refuses_while_a_switch_is_recorded() {
    let f = amd(false);
    f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap();
    // Ours and alive: a second switch would overwrite the originals.
    let e = f.tree.apply(&AMD, &set("kvm_amd.nested=0")).unwrap_err();
    assert!(matches!(e, SwitchError::SwitchActive { .. }), "{e}");
    f.rewrite_state(|s| s.pid = DEAD_PID);
    let e = f.tree.apply(&AMD, &set("kvm_amd.nested=0")).unwrap_err();
    assert!(
        matches!(e, SwitchError::PendingRestore { pid: DEAD_PID, .. }),
        "{e}"
    );
    assert!(one_line(&e).contains("ipivmm host --restore"));
    assert_eq!(f.state().original["avic"], "N", "originals kept");
}

#[test]
fn failed_load_rolls_back_to_the_originals() {
    let f = amd(false);
    f.fake.fail_next_loads(1);
    let e = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap_err();
    assert!(
        matches!(&e, SwitchError::Load { outcome, .. } if outcome.contains("nothing changed")),
        "{e}"
    );
    one_line(&e);
    assert_eq!(f.param("kvm_amd", "avic"), "N");
    assert!(!f.tree.state_file.exists());
    let calls = f.fake.calls();
    assert!(
        calls[2].starts_with("modprobe kvm_amd avic=N force_avic=N"),
        "{calls:?}"
    );
}

#[test]
fn failed_load_and_rollback_keep_the_state_file() {
    let f = amd(false);
    f.fake.fail_next_loads(2);
    let e = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap_err();
    assert!(
        matches!(&e, SwitchError::Load { outcome, .. } if outcome.contains("NOT loaded")),
        "{e}"
    );
    assert!(!f.sys().join("kvm_amd").exists());
    assert_eq!(f.state().original["avic"], "N");
    let r = f.tree.restore().unwrap();
    assert_eq!(r.module.as_deref(), Some("kvm_amd"));
    assert_eq!(f.param("kvm_amd", "avic"), "N");
    assert!(!f.tree.state_file.exists());
}

#[test]
fn bad_value_fails_the_load_and_rolls_back() {
    let f = amd(false);
    let e = f
        .tree
        .apply(&AMD, &set("kvm_amd.pause_filter_count=lots"))
        .unwrap_err();
    assert!(
        matches!(&e, SwitchError::Load { source, .. } if source.detail.contains("Invalid argument")),
        "{e}"
    );
    assert_eq!(f.param("kvm_amd", "pause_filter_count"), "3000");
    assert!(!f.tree.state_file.exists());
}

/// Unloads through the fake, then reports a failure (as modprobe -r does
/// when a dependency such as kvm cannot be removed).
#[derive(Debug)]
struct RemoveThenFail(Arc<FakeModprobe>);

impl ModprobeRunner for RemoveThenFail {
    fn remove(&self, module: &str) -> Result<(), RunnerError> {
        self.0.remove(module)?;
        Err(RunnerError {
            command: format!("modprobe -r {module}"),
            detail: "FATAL: Module kvm is in use.".into(),
        })
    }

    fn load(&self, module: &str, params: &[(String, String)]) -> Result<(), RunnerError> {
        self.0.load(module, params)
    }
}

#[test]
fn unload_errors_count_only_while_the_module_stays() {
    let mut f = amd(false);
    f.fake.set_refcnt("kvm", 2).unwrap(); // kvm stays: only kvm_amd goes
    f.tree.runner = Arc::new(RemoveThenFail(f.fake.clone()));
    let a = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap();
    assert_eq!(a.read_back["avic"], "Y");
    // A refused unload (the module stays: a VM started after the check) is
    // an error, changes nothing and leaves no state file.
    f.tree.runner = Arc::new(RefuseRemove);
    f.tree.restore().unwrap_err();
    f.tree.runner = f.fake.clone();
    f.tree.restore().unwrap();
    f.tree.runner = Arc::new(RefuseRemove);
    let e = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap_err();
    assert!(
        matches!(&e, SwitchError::Unload { source } if source.detail.contains("in use")),
        "{e}"
    );
    assert!(one_line(&e).contains("nothing was changed"));
    assert!(!f.tree.state_file.exists());
    assert_eq!(f.param("kvm_amd", "avic"), "N");
}

/// A modprobe -r that the kernel refuses.
#[derive(Debug)]
struct RefuseRemove;

impl ModprobeRunner for RefuseRemove {
    fn remove(&self, module: &str) -> Result<(), RunnerError> {
        Err(RunnerError {
            command: format!("modprobe -r {module}"),
            detail: format!("FATAL: Module {module} is in use."),
        })
    }

    fn load(&self, _: &str, _: &[(String, String)]) -> Result<(), RunnerError> {
        Ok(())
    }
}

// --- state file --------------------------------------------------------

#[test]
fn state_file_is_written_atomically() {
    let f = amd(false);
    let s = State::new(
        "kvm_amd",
        BTreeMap::from([("avic".into(), "N".into())]),
        &set("kvm_amd.avic=1"),
        BTreeMap::new(),
    );
    write_state(&f.tree.state_file, &s).unwrap();
    assert_eq!(read_state(&f.tree.state_file).unwrap(), Some(s.clone()));
    let parent = f.tree.state_file.parent().unwrap().to_path_buf();
    let names = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(names(&parent), ["module-switch.json"]);
    // A failing rename (the target is a non-empty directory) leaves
    // neither a partial file nor a temporary one.
    let blocked = parent.join("blocked.json");
    std::fs::create_dir(&blocked).unwrap();
    std::fs::write(blocked.join("keep"), "x").unwrap();
    let e = write_state(&blocked, &s).unwrap_err();
    assert!(matches!(e, SwitchError::StateIo { .. }), "{e}");
    one_line(&e);
    let mut left = names(&parent);
    left.sort();
    assert_eq!(left, ["blocked.json", "module-switch.json"]);
    assert_eq!(names(&blocked), ["keep"]);
}

#[test]
fn unwritable_state_file_stops_before_unloading() {
    let mut f = amd(false);
    let blocked = f.dir.as_path().join("blocked");
    std::fs::create_dir_all(blocked.join("x")).unwrap();
    f.tree.state_file = blocked.clone();
    let e = f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap_err();
    assert!(matches!(e, SwitchError::StateIo { .. }), "{e}");
    assert!(f.fake.calls().is_empty(), "nothing unloaded");
    assert_eq!(f.param("kvm_amd", "avic"), "N");
}

#[test]
fn refuses_invalid_state_files() {
    let f = amd(false);
    std::fs::create_dir_all(f.tree.state_file.parent().unwrap()).unwrap();
    std::fs::write(&f.tree.state_file, "{ not json").unwrap();
    let e = read_state(&f.tree.state_file).unwrap_err();
    assert!(matches!(e, SwitchError::StateInvalid { .. }), "{e}");
    one_line(&e);
    let mut s = State::new("kvm_amd", BTreeMap::new(), &[], BTreeMap::new());
    s.format = "something/9".into();
    std::fs::write(&f.tree.state_file, serde_json::to_string(&s).unwrap()).unwrap();
    assert!(matches!(
        read_state(&f.tree.state_file),
        Err(SwitchError::StateInvalid { .. })
    ));
    s.format = STATE_FORMAT.into();
    s.module = "kvm".into();
    std::fs::write(&f.tree.state_file, serde_json::to_string(&s).unwrap()).unwrap();
    assert!(matches!(
        read_state(&f.tree.state_file),
        Err(SwitchError::StateInvalid { .. })
    ));
    // A damaged state file also blocks a new switch.
    assert!(matches!(
        f.tree.apply(&AMD, &set("kvm_amd.avic=1")),
        Err(SwitchError::StateInvalid { .. })
    ));
    assert_eq!(
        read_state(&f.dir.as_path().join("none.json")).unwrap(),
        None
    );
}

// --- restore -----------------------------------------------------------

#[test]
fn restore_reloads_the_original_values_and_removes_the_state_file() {
    let f = amd(false);
    f.set_param("kvm_amd", "nested", "0");
    f.tree
        .apply(&AMD, &set("kvm_amd.avic=1,kvm_amd.force_avic=Y"))
        .unwrap();
    assert_eq!(f.param("kvm_amd", "avic"), "Y");
    assert_eq!(f.param("kvm_amd", "nested"), "1");
    let r = f.tree.restore().unwrap();
    assert_eq!(
        f.fake.calls().last().unwrap(),
        "modprobe kvm_amd avic=N force_avic=N nested=0 npt=Y pause_filter_count=3000"
    );
    assert_eq!(f.param("kvm_amd", "avic"), "N");
    assert_eq!(f.param("kvm_amd", "force_avic"), "N");
    assert_eq!(f.param("kvm_amd", "nested"), "0", "hand-loaded value back");
    assert!(r.mismatches.is_empty() && r.skipped.is_empty());
    assert_eq!(r.passed.len(), 5);
    assert!(!f.tree.state_file.exists());
}

#[test]
fn restores_after_a_crash() {
    let f = amd(false);
    f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap();
    assert_eq!(
        pending_restore(&f.tree.state_file).unwrap(),
        None,
        "owner alive"
    );
    f.rewrite_state(|s| s.pid = DEAD_PID);
    let pending = pending_restore(&f.tree.state_file)
        .unwrap()
        .expect("pending");
    assert_eq!(
        (pending.module.as_str(), pending.pid),
        ("kvm_amd", DEAD_PID)
    );
    let r = f.tree.restore().unwrap();
    assert_eq!(r.module.as_deref(), Some("kvm_amd"));
    assert_eq!(f.param("kvm_amd", "avic"), "N");
    assert_eq!(pending_restore(&f.tree.state_file).unwrap(), None);
}

#[test]
fn restores_a_module_left_unloaded_by_a_crash() {
    let f = amd(false);
    f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap();
    f.rewrite_state(|s| s.pid = DEAD_PID);
    f.fake.remove("kvm_amd").unwrap(); // died between unload and load
    let before = f.fake.calls().len();
    f.tree.restore().unwrap();
    let calls = f.fake.calls();
    assert_eq!(calls.len(), before + 1, "{calls:?}");
    assert!(calls[before].starts_with("modprobe kvm_amd avic=N"));
    assert_eq!(f.param("kvm_amd", "avic"), "N");
    assert_eq!(f.param("kvm", "halt_poll_ns"), "200000", "kvm loaded too");
}

#[test]
fn restore_is_idempotent() {
    let f = amd(false);
    let mut sw = f.tree.switch(&AMD, &set("kvm_amd.avic=1")).unwrap();
    assert!(!sw.is_restored());
    let first = sw.restore().unwrap();
    assert!(!first.was_noop() && sw.is_restored());
    let calls = f.fake.calls().len();
    assert!(sw.restore().unwrap().was_noop());
    assert!(f.tree.restore().unwrap().was_noop());
    drop(sw);
    assert_eq!(f.fake.calls().len(), calls, "nothing reloaded again");
    assert_eq!(f.param("kvm_amd", "avic"), "N");
}

#[test]
fn dropping_the_guard_restores() {
    let f = amd(false);
    {
        let sw = f.tree.switch(&AMD, &set("kvm_amd.avic=1")).unwrap();
        assert_eq!(sw.applied().read_back["avic"], "Y");
        assert_eq!(f.param("kvm_amd", "avic"), "Y");
    }
    assert_eq!(f.param("kvm_amd", "avic"), "N");
    assert!(!f.tree.state_file.exists());
}

#[test]
fn restore_refuses_while_in_use_and_keeps_the_state() {
    let f = amd(false);
    let mut sw = f.tree.switch(&AMD, &set("kvm_amd.avic=1")).unwrap();
    f.fake.set_refcnt("kvm_amd", 1).unwrap();
    let e = sw.restore().unwrap_err();
    assert!(matches!(e, SwitchError::InUse { .. }), "{e}");
    assert!(!sw.is_restored() && f.tree.state_file.exists());
    f.fake.set_refcnt("kvm_amd", 0).unwrap();
    sw.restore().unwrap();
    assert_eq!(f.param("kvm_amd", "avic"), "N");
}

#[test]
fn restore_refuses_a_switch_owned_by_another_live_process() {
    let f = amd(false);
    f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap();
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    f.rewrite_state(|s| {
        s.pid = child.id();
        s.pid_start = None;
    });
    let r = f.tree.restore();
    let _ = child.kill();
    let _ = child.wait();
    let e = r.unwrap_err();
    assert!(matches!(e, SwitchError::SwitchActive { .. }), "{e}");
    assert_eq!(f.param("kvm_amd", "avic"), "Y", "left alone");
    // Once that process is gone, it is a pending restore.
    assert!(pending_restore(&f.tree.state_file).unwrap().is_some());
    f.tree.restore().unwrap();
}

#[test]
fn restore_needs_root_but_not_a_state_file() {
    let mut f = amd(false);
    f.tree.euid = 1000;
    assert!(f.tree.restore().unwrap().was_noop());
    f.tree.euid = 0;
    f.tree.apply(&AMD, &set("kvm_amd.avic=1")).unwrap();
    f.tree.euid = 1000;
    assert!(matches!(f.tree.restore(), Err(SwitchError::NotRoot { .. })));
}

#[test]
fn restore_skips_values_modprobe_would_reject() {
    let original: BTreeMap<String, String> = [
        ("vmentry_l1d_flush", "not required"),
        ("enable_apicv", "Y"),
        ("odd", ""),
        ("quoted", "a\"b"),
    ]
    .iter()
    .map(|(p, v)| (p.to_string(), v.to_string()))
    .collect();
    let (pass, skipped) = restore_params(&original);
    assert_eq!(pass, [("enable_apicv".to_string(), "Y".to_string())]);
    let names: Vec<&str> = skipped.iter().map(|s| s.param.as_str()).collect();
    assert_eq!(names, ["odd", "quoted", "vmentry_l1d_flush"]);
    assert!(skipped[2].reason.contains("L1TF"));
    assert!(restorable("vmentry_l1d_flush", "cond").is_ok());
}

// --- the real runner and helpers ---------------------------------------

#[test]
fn real_runner_reports_failures_in_one_line() {
    let missing = Modprobe {
        program: PathBuf::from("/nonexistent/modprobe"),
    };
    let e = missing.remove("kvm_amd").unwrap_err();
    assert_eq!(e.command, "modprobe -r kvm_amd");
    assert!(
        e.detail.contains("cannot run") && e.detail.contains("kmod"),
        "{e}"
    );
    let failing = Modprobe {
        program: PathBuf::from("false"),
    };
    let params = [("avic".to_string(), "1".to_string())];
    let e = failing.load("kvm_amd", &params).unwrap_err();
    assert_eq!(e.command, "modprobe kvm_amd avic=1");
    assert!(e.detail.contains("exit status"), "{e}");
    one_line(&e);
    assert_eq!(Modprobe::default().program, PathBuf::from("modprobe"));
}

#[test]
fn names_vms_from_debugfs_directories() {
    assert_eq!(
        vm_dir_name("2147483632-11").as_deref(),
        Some("pid 2147483632 fd 11")
    );
    let me = std::process::id();
    let mine = vm_dir_name(&format!("{me}-7")).unwrap();
    assert!(
        mine.starts_with(&format!("pid {me} (")) && mine.ends_with(") fd 7"),
        "{mine}"
    );
    for not_vm in ["kvm", "12-ab", "-3", "halt_exits", "1-2-3"] {
        assert_eq!(vm_dir_name(not_vm), None, "{not_vm}");
    }
}

#[test]
fn system_tree_uses_the_default_paths() {
    let t = ModuleTree::system();
    assert_eq!(t.sys_module, PathBuf::from("/sys/module"));
    assert_eq!(t.debugfs_kvm, PathBuf::from("/sys/kernel/debug/kvm"));
    assert_eq!(
        t.state_file,
        PathBuf::from("/run/ipivmm/module-switch.json")
    );
    assert_eq!(t.euid, effective_uid());
}
