//! Stage 5 of a run: join the vCPU threads and turn what they left in the
//! shared results into the report.
use super::spawn::Running;
use super::supervise::WaitEnd;
use crate::results::{HostSettings, RunConfig, RunReport, RunStatus, Timings, VcpuEnd, VcpuResult};
use crate::vm::Prepared;
use std::time::Instant;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// The report of a run that `supervise` finished waiting for.
pub fn report(r: Running, out: WaitEnd, p: &Prepared, started: Instant) -> RunReport {
    let Running {
        threads,
        shared,
        serial,
        tsc_khz,
        setup_ns,
        vm_fd,
        memory,
        ..
    } = r;
    // Every thread has signalled its end and is only unwinding its fds: join
    // them so a run leaves no thread or fd behind. Threads stuck in the
    // kernel past the grace period are left detached rather than hang us.
    for t in threads {
        if !out.abandoned || t.is_finished() {
            let _ = t.join();
        }
    }
    let guest_resident_kib = resident_kib(&memory);
    drop(vm_fd);
    drop(memory);
    serial.flush();
    // Taken, not cloned: a run near its guest memory budget must not need
    // twice the budget here.
    let vcpus: Vec<VcpuResult> = (0..p.config.vcpus)
        .map(|i| {
            let mut slot = shared.result(i);
            let empty = VcpuResult::new(slot.index, slot.apic_id);
            std::mem::replace(&mut *slot, empty)
        })
        .collect();
    let status = if out.cancelled {
        RunStatus::Cancelled
    } else if let Some(e) = shared.budget.excess() {
        RunStatus::OverBudget {
            vcpu: e.vcpu,
            data: e.kind.name().to_string(),
            limit_bytes: e.limit,
            reason: e.to_string(),
        }
    } else if out.timed_out {
        RunStatus::TimedOut {
            after_s: p.config.timeout.as_secs(),
            stuck: stuck_vcpus(&vcpus),
            hint: timeout_hint(&p.config, &vcpus),
        }
    } else {
        status_of(&vcpus)
    };
    let first_message_ns = shared
        .first_message
        .get()
        .map(|t| t.duration_since(started).as_nanos() as u64);
    RunReport {
        mode: RunConfig::from(&p.config),
        apicv: p.plan.clone(),
        status,
        tsc_khz,
        timings: Timings {
            setup_ns,
            first_message_ns,
            total_ns: started.elapsed().as_nanos() as u64,
            peak_rss_kib: peak_rss_kib(),
            guest_resident_kib,
        },
        vcpus,
        serial_tail: serial.tail_text(),
        serial_dropped_bytes: serial.stdout_dropped(),
        observer_effect: None,
        apicv_observed: None,
        host_settings: p.host.as_ref().map(HostSettings::of),
        host_param: None,
        placement: None,
        repeat: None,
        host_load: None,
        recorded_metrics: None,
        host: p.host.clone(),
    }
}

/// How much of guest RAM is resident (mincore(2) over every region), KiB.
pub(crate) fn resident_kib(memory: &GuestMemoryMmap) -> Option<u64> {
    const PAGE: usize = 4096;
    let mut pages = 0u64;
    for region in memory.iter() {
        let addr = memory.get_host_address(region.start_addr()).ok()?;
        let len = usize::try_from(region.len()).ok()?;
        let mut vec = vec![0u8; len.div_ceil(PAGE)];
        // SAFETY: [addr, addr + len) is one live mapping owned by `memory`
        // (page-aligned, as mmap returns it); `vec` holds one byte per page
        // of it, which is all mincore(2) writes.
        let rc = unsafe { libc::mincore(addr.cast(), len, vec.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        pages += vec.iter().filter(|b| **b & 1 != 0).count() as u64;
    }
    Some(pages * (PAGE as u64) / 1024)
}

/// VmHWM of this process from /proc/self/status, in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// "vcpuN at rip=..." for every vCPU the host had to stop.
pub(crate) fn stuck_vcpus(vcpus: &[VcpuResult]) -> String {
    let stuck: Vec<String> = vcpus
        .iter()
        .filter_map(|v| match &v.end {
            Some(VcpuEnd::Stopped {
                registers,
                wait_for_sipi,
                ..
            }) => {
                let at = match registers {
                    Some(r) => format!("vcpu{} at rip={:#x} rsp={:#x}", v.index, r.rip, r.rsp),
                    None => format!("vcpu{} (registers unreadable)", v.index),
                };
                Some(if *wait_for_sipi {
                    format!("{at} in wait-for-SIPI (INIT received, no start-up IPI)")
                } else {
                    at
                })
            }
            None => Some(format!("vcpu{} did not stop", v.index)),
            _ => None,
        })
        .collect();
    stuck.join(", ")
}

/// What to change so that a run that timed out finishes, from why it did
/// not: a vCPU waiting for a SIPI (no timeout helps), the halt settle time
/// alone filling the timeout, the built-in payload still in its warm-up,
/// else the iterations. Empty: the default hint
/// (the results model's default hint).
pub(crate) fn timeout_hint(c: &crate::config::VmConfig, vcpus: &[VcpuResult]) -> String {
    let stopped = || {
        vcpus.iter().filter_map(|v| match &v.end {
            Some(VcpuEnd::Stopped {
                phase,
                wait_for_sipi,
                ..
            }) => Some((v.index, phase.as_deref(), *wait_for_sipi)),
            _ => None,
        })
    };
    let sipi: Vec<usize> = stopped().filter(|s| s.2).map(|s| s.0).collect();
    if let Some(first) = sipi.first() {
        let others = match sipi.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        return format!(
            "vcpu{first}{others} received an INIT and waits for a SIPI that never came: no timeout is long enough; the payload must follow INIT with a SIPI, or not send INIT"
        );
    }
    let operations = c.warmup.saturating_add(c.iterations);
    let settle_total = c
        .halt_settle
        .saturating_mul(u32::try_from(operations).unwrap_or(u32::MAX));
    if c.target_wait == crate::mode::TargetWait::Halt && settle_total * 2 >= c.timeout {
        return format!(
            "the halt settle time alone is {} ns x {operations} operations = {:.1} s of a {} s timeout: lower --halt-settle-ns (VmConfig::halt_settle) or raise --timeout",
            c.halt_settle.as_nanos(),
            settle_total.as_secs_f64(),
            c.timeout.as_secs()
        );
    }
    if c.payload.is_builtin()
        && stopped().any(|s| s.1 == Some(ipivmm_abi::builtin_phases::WARMUP.1))
    {
        return format!(
            "stopped in the warm-up ({} iterations, before anything was measured): lower --warmup (VmConfig::warmup) or raise --timeout",
            c.warmup
        );
    }
    String::new()
}

/// Completed when every vCPU is Done(0); otherwise one line per culprit.
pub(crate) fn status_of(vcpus: &[VcpuResult]) -> RunStatus {
    let mut reasons = Vec::new();
    for v in vcpus {
        match &v.end {
            Some(VcpuEnd::Done { status: 0, .. }) | Some(VcpuEnd::Stopped { .. }) => {}
            Some(VcpuEnd::Done { status, message }) => reasons.push(format!(
                "vcpu{}: payload reported failure {status}: {message}",
                v.index
            )),
            Some(VcpuEnd::Fault { reason, registers }) => {
                let regs = registers
                    .as_ref()
                    .map(|r| format!(" [{r}]"))
                    .unwrap_or_default();
                reasons.push(format!("vcpu{}: {reason}{regs}", v.index));
            }
            None => reasons.push(format!("vcpu{}: did not stop", v.index)),
        }
    }
    let all_done = vcpus
        .iter()
        .all(|v| matches!(v.end, Some(VcpuEnd::Done { .. })));
    if reasons.is_empty() && all_done {
        return RunStatus::Completed;
    }
    if reasons.is_empty() {
        reasons.push("run stopped before every vCPU finished".into());
    }
    RunStatus::Failed {
        reason: reasons.join("; "),
    }
}
