//! `ipivmm host --set` and `--restore`: host-wide APICv/AVIC/IPIv switches
//! (the vendor module reloaded with other parameters, the originals kept
//! in a state file until restored); the lines describing them are
//! `ipivmm_host::module_switch::report`'s.
use super::fail;
use ipivmm_host::facts::{probe, HostInfo};
use ipivmm_host::module_switch::report::{applied_lines, restored_lines, verdict_line};
use ipivmm_host::module_switch::{Applied, ModuleSetting, ModuleTree};
use serde::Serialize;
use std::process::ExitCode;

/// What `host --set --json` prints.
#[derive(Serialize)]
struct SetReport<'a> {
    applied: &'a Applied,
    mismatches: Vec<ipivmm_host::module_switch::Mismatch>,
    host: Option<HostInfo>,
}

/// `ipivmm host --set LIST`: switch, then print what was asked, what reads
/// back, the mismatches with hints and where the originals are kept.
pub fn set(settings: &[ModuleSetting], json: bool) -> ExitCode {
    let host = match probe() {
        Ok(h) => h,
        Err(e) => return fail(format!("cannot read host facts: {e}")),
    };
    let applied = match ModuleTree::system().apply(&host.backend, settings) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    // The verdicts as the reloaded module decides them.
    let after = probe().ok();
    if json {
        let r = SetReport {
            mismatches: applied.mismatches(),
            applied: &applied,
            host: after,
        };
        return print_json(&r);
    }
    for line in applied_lines(&applied) {
        println!("{line}");
    }
    if applied.reloaded {
        println!("  they stay recorded until `ipivmm host --restore` puts them back");
    }
    if let Some(h) = &after {
        println!("{}", verdict_line(&h.verdicts));
    }
    ExitCode::SUCCESS
}

/// `ipivmm host --restore`: put back what the state file recorded.
pub fn restore(json: bool) -> ExitCode {
    let restored = match ModuleTree::system().restore() {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if json {
        return print_json(&restored);
    }
    for line in restored_lines(&restored) {
        println!("{line}");
    }
    if restored.mismatches.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_json(v: &impl Serialize) -> ExitCode {
    match serde_json::to_string_pretty(v) {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
