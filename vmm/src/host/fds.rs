//! The process's file-descriptor budget: what a run of N vCPUs holds, the
//! limit raised to the hard one, and each vCPU thread's share for its
//! counters. One policy for the VM's creation (`vm`), the counters
//! (`vcpu::trace`) and the run (`run`).

/// Descriptors a run holds besides the tracepoints: per vCPU its own fd and
/// its KVM stats fd.
pub(crate) const OTHER_FDS_PER_VCPU: usize = 2;
/// Descriptors kept free for the rest of the run: the VM, the event loop,
/// eventfds, timers, the result files. (The creation-time sampler's fds,
/// one per CPU, are open when the budget is taken.)
pub(crate) const RESERVED_FDS: usize = 64;

/// RLIMIT_NOFILE as a run of `vcpus` vCPUs finds it, and the share of it
/// each vCPU thread may spend on tracepoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdLimit {
    /// The soft limit (after [`raise_fd_limit`]).
    pub limit: u64,
    /// Descriptors already open when the run started.
    pub open: usize,
    /// vCPUs of the run.
    pub vcpus: usize,
}

impl FdLimit {
    /// The limit now, raised to the hard limit first.
    pub fn now(vcpus: usize) -> Self {
        raise_fd_limit();
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        // The directory's own fd is listed too; unreadable: assume a few.
        let open = std::fs::read_dir("/proc/self/fd").map_or(16, |d| d.count());
        Self { limit, open, vcpus }
    }

    /// Tracepoint fds each vCPU thread may open.
    pub fn per_vcpu(&self) -> usize {
        let n = self.vcpus.max(1);
        let fixed = self.open + n * OTHER_FDS_PER_VCPU + RESERVED_FDS;
        let limit = usize::try_from(self.limit).unwrap_or(usize::MAX);
        limit.saturating_sub(fixed) / n
    }

    /// The limit a run wanting `wanted` tracepoint fds per vCPU needs.
    pub fn needed(&self, wanted: usize) -> usize {
        self.open + self.vcpus * (OTHER_FDS_PER_VCPU + wanted) + RESERVED_FDS
    }
}

/// Lift the soft RLIMIT_NOFILE (often 1024) to the hard limit, once per run
/// before its VM exists: every vCPU holds two fds from its creation on
/// ([`OTHER_FDS_PER_VCPU`]), and each vCPU thread's tracepoint counters one
/// more per counter. Failure only means fewer fds: the VM's creation then
/// refuses a vCPU count the limit cannot hold (`RunError::FdLimit`), and
/// counters that do not fit are reported unavailable with the fix.
pub(crate) fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current < lim.maximum {
        lim.current = lim.maximum;
        let _ = setrlimit(Resource::Nofile, lim);
    }
}
