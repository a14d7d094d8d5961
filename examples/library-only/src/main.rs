//! ipivmm as a library, with nothing but `ipivmm` in Cargo.toml: is KVM
//! usable here, boot a VM with the guest's console on stdout, read the
//! counters of every vCPU and phase.
use ipivmm::{run, RunOptions, SerialSink, VmConfig};
use ipivmm::analysis::mode::{ApicMode, TargetWait, Workload};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let kvm = match ipivmm::kvm_available() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("library-only: no VM can run here: {e}");
            return ExitCode::from(2);
        }
    };
    println!("library-only: {kvm}");
    let config = VmConfig {
        vcpus: 2,
        apic: ApicMode::X2apic,
        workload: Workload::Pingpong,
        target_wait: TargetWait::Spin,
        iterations: 200,
        warmup: 20,
        timeout: Duration::from_secs(120),
        // kvm:* tracepoints need root and tracefs; KVM's binary stats do not.
        tracepoints: false,
        ..VmConfig::default()
    };
    let opts = RunOptions {
        serial: SerialSink::Stdout,
        ..RunOptions::default()
    };
    let report = match run(&config, opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("library-only: the run could not start: {e}");
            return ExitCode::from(2);
        }
    };
    println!("library-only: {} ({})", report.label(), report.status.text());
    for vcpu in &report.vcpus {
        for phase in &vcpu.phases {
            let kvm_exits = phase.kvm_stats.get("exits").copied().unwrap_or(0);
            print!(
                "library-only: vcpu{} phase {} '{}': {} IPIs sent, {} received, {} KVM exits, {} userspace exits",
                vcpu.index,
                phase.id,
                phase.name,
                phase.guest.ipis_sent,
                phase.guest.ipis_received,
                kvm_exits,
                phase.exits.total()
            );
            match &phase.latency {
                Some(l) => println!(", p50 {} cycles over {} samples", l.p50, l.count),
                None => println!(),
            }
        }
    }
    if report.succeeded() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
