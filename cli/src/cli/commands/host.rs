//! `ipivmm host`: what this host's KVM can do for IPI measurements; with
//! `--set`/`--restore`, the host-wide switches (`host_switch`).
use super::{fail, host_switch};
use crate::cli::args::HostArgs;
use comfy_table::{presets::UTF8_BORDERS_ONLY, ContentArrangement, Table};
use ipivmm::host::CapInfo;
use ipivmm_host::facts::{probe, ApicvSupport, HostInfo};
use ipivmm_host::lab::Hardware;
use ipivmm_host::module_switch::{read_state, State, DEFAULT_STATE_FILE};
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;

#[derive(Serialize)]
struct HostReport {
    host: HostInfo,
    kvm_capabilities: Vec<CapInfo>,
    kvm_error: Option<String>,
    /// Where what this host lacks (APICv, IPIv, AVIC, x2AVIC) is answered:
    /// a line each naming the lab command.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    elsewhere: Vec<String>,
    /// A host switch recorded and not restored (`ipivmm host --restore`).
    #[serde(skip_serializing_if = "Option::is_none")]
    module_switch: Option<State>,
}

/// Run the `host` subcommand.
pub fn main(args: &HostArgs) -> ExitCode {
    if let Some(list) = &args.set {
        return host_switch::set(&list.0, args.json);
    }
    if args.restore {
        return host_switch::restore(args.json);
    }
    let state_file = Path::new(DEFAULT_STATE_FILE);
    if let Some(line) = ipivmm_host::module_switch::report::pending_line(state_file) {
        super::say(&format!("ipivmm: {line}"));
    }
    let host = match probe() {
        Ok(h) => h,
        Err(e) => return fail(format!("cannot read host facts: {e}")),
    };
    let (caps, kvm_error) = match CapInfo::query(&args.kvm_device) {
        Ok(caps) => (caps, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let report = HostReport {
        elsewhere: elsewhere(&host),
        host,
        kvm_capabilities: caps,
        kvm_error,
        module_switch: read_state(state_file).ok().flatten(),
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => return fail(e),
        }
    } else {
        print!("{}", render(&report));
    }
    ExitCode::SUCCESS
}

/// One line per acceleration the host lacks, naming the lab command that
/// answers what it would.
fn elsewhere(h: &HostInfo) -> Vec<String> {
    let v = &h.verdicts;
    [
        (Hardware::Apicv, &v.apicv),
        (Hardware::Ipiv, &v.ipiv),
        (Hardware::Avic, &v.avic),
        (Hardware::X2avic, &v.x2avic),
    ]
    .into_iter()
    .filter(|(_, s)| !matches!(s, ApicvSupport::Available))
    .map(|(hw, _)| hw.where_answered())
    .collect()
}

fn verdict(v: &ApicvSupport) -> String {
    match v {
        ApicvSupport::Available => "available".into(),
        ApicvSupport::Unavailable(why) => format!("unavailable: {why}"),
    }
}

/// A table of at most [`crate::output::fit::WIDTH`] columns: a long value
/// (a module's parameter, a capability's use) wraps inside its cell.
fn fitted() -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_content_arrangement(ContentArrangement::Dynamic);
    t.set_width(crate::output::fit::WIDTH as u16);
    t
}

fn render(r: &HostReport) -> String {
    let h = &r.host;
    let mut t = fitted();
    let flags: Vec<&str> = h
        .virt_flags
        .iter()
        .filter(|(_, on)| **on)
        .map(|(f, _)| f.as_str())
        .collect();
    let rows: Vec<(String, String)> = vec![
        (
            "CPU".into(),
            format!(
                "{} ({}), {} logical CPUs",
                h.cpu_model, h.cpu_vendor, h.logical_cpus
            ),
        ),
        ("virtualization flags".into(), flags.join(" ")),
        ("kernel".into(), h.kernel_release.clone()),
        (
            "KVM backend".into(),
            format!("{:?} (modules: {})", h.backend, h.modules.join(", ")),
        ),
        ("APICv (Intel)".into(), verdict(&h.verdicts.apicv)),
        ("IPIv".into(), verdict(&h.verdicts.ipiv)),
        ("AVIC (AMD)".into(), verdict(&h.verdicts.avic)),
        ("x2AVIC".into(), verdict(&h.verdicts.x2avic)),
    ];
    for (k, v) in rows {
        t.add_row(vec![k, v]);
    }
    for (module, params) in &h.params {
        for (name, value) in params {
            t.add_row(vec![format!("{module}.{name}"), value.clone()]);
        }
    }
    let mut out = format!("{t}\n");
    for line in &r.elsewhere {
        out.push_str(&format!("not here: {line}\n"));
    }
    if let Some(e) = &r.kvm_error {
        out.push_str(&crate::output::fit::wrap(&format!(
            "KVM capabilities: not read ({e})\n"
        )));
        return out;
    }
    let mut c = fitted();
    c.set_header(vec!["capability", "value", "used for"]);
    for cap in &r.kvm_capabilities {
        let value = match &cap.decoded {
            Some(d) => format!("{} ({d})", cap.value),
            None => cap.value.to_string(),
        };
        c.add_row(vec![cap.name.to_string(), value, cap.used_for.to_string()]);
    }
    out.push_str(&format!("{c}\n"));
    out
}
