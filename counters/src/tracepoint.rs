//! Counting tracepoints on the calling thread with `perf_event_open`.
//!
//! A [`TracepointCounter`] is one `PERF_TYPE_TRACEPOINT` counting event
//! (`config` = tracefs event id) bound to the thread that opened it
//! (`pid = 0, cpu = -1`, no `inherit`, nothing excluded), optionally with an
//! in-kernel filter (`PERF_EVENT_IOC_SET_FILTER`). It is opened disabled,
//! filtered, then enabled, so no unfiltered event is ever counted.
//!
//! A [`TracepointSet`] is what a vCPU thread opens for itself from a list of
//! [`CounterSpec`]s (see [`crate::specs::kvm_specs`]). It never fails as a whole: each
//! counter is either available or unavailable with a reason.
//!
//! Attribution: a counter sees the events that fire *in the context of its
//! thread*. For `kvm_exit`, `kvm_apic`, `kvm_msr`, `kvm_mmio`, `kvm_apic_ipi`,
//! `kvm_hypercall` that is the vCPU that exited. `kvm_apic_accept_irq` fires
//! on the thread that delivers the interrupt — for an IPI that is the
//! *sender's* vCPU thread, not the target's (and for device interrupts, the
//! thread that called the irqfd/ioctl). `kvm_eoi` fires on the vCPU that
//! writes EOI (the receiver). `kvm_vcpu_wakeup` fires on the vCPU that halted.

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::unix::io::FromRawFd;

use serde::Serialize;

use crate::tracefs::{EventFormat, Tracefs, TracefsError};

/// `struct perf_event_attr`, from perf-event-open-sys's bindings.
pub use perf_event_open_sys::bindings::perf_event_attr as PerfEventAttr;
use perf_event_open_sys::bindings::{
    PERF_ATTR_SIZE_VER5, PERF_FLAG_FD_CLOEXEC, PERF_TYPE_TRACEPOINT,
};
pub(crate) use perf_event_open_sys::ioctls;

/// The attributes of an event on tracepoint `id` (tracefs id), opened
/// disabled; the size passed is `PERF_ATTR_SIZE_VER5` (Linux 4.1+), which
/// every field set here fits in.
pub(crate) fn tracepoint_attr(id: u64) -> PerfEventAttr {
    let mut attr = PerfEventAttr {
        type_: PERF_TYPE_TRACEPOINT,
        size: PERF_ATTR_SIZE_VER5,
        config: id,
        ..Default::default()
    };
    attr.set_disabled(1);
    attr
}

/// An ioctl of perf-event-open-sys on `file`: -1 becomes the OS error.
pub(crate) fn perf_ioctl<A>(
    file: &File,
    ioctl: unsafe fn(libc::c_int, A) -> libc::c_int,
    arg: A,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `file` is a perf event this process owns, open for the call;
    // every ioctl passed here (ENABLE, DISABLE, RESET, SET_OUTPUT, ID,
    // SET_FILTER) takes the argument type its binding declares, and the
    // callers pass pointers that are valid for the call (ID: a live u64,
    // SET_FILTER: a NUL-terminated string the kernel copies).
    let ret = unsafe { ioctl(file.as_raw_fd(), arg) };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Errors of a single tracepoint counter.
#[derive(Debug, thiserror::Error)]
pub enum TracepointError {
    /// `perf_event_open` failed.
    #[error("perf_event_open(tracepoint id {id}) failed: {source}")]
    Open {
        /// Tracepoint id.
        id: u64,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The kernel rejected the filter.
    #[error("PERF_EVENT_IOC_SET_FILTER {filter:?} failed: {source}")]
    Filter {
        /// The filter text.
        filter: String,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The filter contains a NUL byte.
    #[error("filter {0:?} contains a NUL byte")]
    FilterNul(String),
    /// Enabling/resetting the event failed.
    #[error("{what} failed: {source}")]
    Ioctl {
        /// Which ioctl.
        what: &'static str,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// Reading the count failed.
    #[error("reading the counter failed: {0}")]
    Read(#[source] std::io::Error),
}

impl TracepointError {
    /// A short, user-facing reason (what is missing and how to fix it).
    pub fn reason(&self) -> String {
        let errno = |e: &std::io::Error| e.raw_os_error().unwrap_or(0);
        match self {
            Self::Open { id, source } => match errno(source) {
                libc::EACCES | libc::EPERM => {
                    "not root / no CAP_PERFMON (EACCES): tracepoint counting needs \
                     root or CAP_PERFMON (see /proc/sys/kernel/perf_event_paranoid)"
                        .to_string()
                }
                libc::EMFILE => "EMFILE: too many open files (raise RLIMIT_NOFILE)".into(),
                libc::ENFILE => "ENFILE: system-wide open file limit reached".into(),
                libc::ENOENT | libc::ENODEV => {
                    format!("perf knows no tracepoint with id {id} (ENOENT)")
                }
                libc::ENOSYS => "perf_event_open not supported by this kernel (ENOSYS)".into(),
                _ => self.to_string(),
            },
            Self::Filter { filter, source } => {
                format!("kernel rejected filter \"{filter}\" ({source})")
            }
            _ => self.to_string(),
        }
    }
}

/// Result type of a single counter.
pub type Result<T> = std::result::Result<T, TracepointError>;

/// `perf_event_open(attr, pid = 0, cpu = -1, group_fd = -1, FD_CLOEXEC)`:
/// an event that follows the calling thread on every CPU.
pub(crate) fn perf_event_open_self(attr: PerfEventAttr) -> std::io::Result<File> {
    perf_event_open_on(attr, 0, -1)
}

/// `perf_event_open` of `attr` for every task on CPU `cpu` (a CPU-wide
/// event: needs CAP_PERFMON or `perf_event_paranoid` <= 0, -1 with RAW).
/// Unlike a task-bound event, the first one of the system does not enable
/// perf's context-switch hooks (`perf_sched_events`, a `synchronize_rcu`).
pub(crate) fn perf_event_open_cpu(attr: PerfEventAttr, cpu: u32) -> std::io::Result<File> {
    let cpu =
        libc::c_int::try_from(cpu).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    perf_event_open_on(attr, -1, cpu)
}

/// A tracepoint event that never counts (opened disabled, on CPU 0, for no
/// task, never enabled) and is kept open only so that its tracepoint stays
/// registered with perf: while it is open, closing another perf event of
/// the same tracepoint (a BPF program's attachment) is not the last close,
/// so it costs no tracepoint unregistration (`perf_trace_event_unreg`'s RCU
/// grace periods), and the tracepoint's perf probe returns at once when no
/// program and no enabled event is on it.
#[derive(Debug)]
pub struct TracepointAnchor {
    _file: File,
}

impl TracepointAnchor {
    /// Opens the anchor of tracepoint `id` (needs CAP_PERFMON or
    /// `perf_event_paranoid` <= 0, as a CPU-wide event).
    pub fn open(id: u64) -> Result<Self> {
        perf_event_open_on(tracepoint_attr(id), -1, 0)
            .map(|file| Self { _file: file })
            .map_err(|source| TracepointError::Open { id, source })
    }
}

/// `perf_event_open(attr, pid, cpu, group_fd = -1, FD_CLOEXEC)`.
fn perf_event_open_on(
    mut attr: PerfEventAttr,
    pid: libc::pid_t,
    cpu: libc::c_int,
) -> std::io::Result<File> {
    let group_fd: libc::c_int = -1;
    // SAFETY: `attr` is an initialized perf_event_attr (zeroed, then set)
    // whose `size` is no larger than the struct; the kernel reads it and may
    // write the size it expects back into our copy. The other arguments are
    // plain integers.
    let ret = unsafe {
        perf_event_open_sys::perf_event_open(
            &mut attr,
            pid,
            cpu,
            group_fd,
            libc::c_ulong::from(PERF_FLAG_FD_CLOEXEC),
        )
    };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd =
        libc::c_int::try_from(ret).map_err(|_| std::io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: `fd` is a fresh descriptor returned by perf_event_open that
    // nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// One tracepoint counting on the thread that opened it.
#[derive(Debug)]
pub struct TracepointCounter {
    file: File,
}

impl TracepointCounter {
    /// Opens a counter for tracepoint `id` on the calling thread, with an
    /// optional in-kernel filter; counting starts before this returns.
    pub fn open(id: u64, filter: Option<&str>) -> Result<Self> {
        let file = perf_event_open_self(tracepoint_attr(id))
            .map_err(|source| TracepointError::Open { id, source })?;
        let counter = Self { file };
        if let Some(f) = filter {
            counter.set_filter(f)?;
        }
        counter.ioctl(ioctls::RESET, "PERF_EVENT_IOC_RESET")?;
        counter.ioctl(ioctls::ENABLE, "PERF_EVENT_IOC_ENABLE")?;
        Ok(counter)
    }

    fn set_filter(&self, filter: &str) -> Result<()> {
        let c = CString::new(filter).map_err(|_| TracepointError::FilterNul(filter.into()))?;
        // The string outlives the call; the kernel copies it (strndup_user)
        // and does not keep it or write through it.
        perf_ioctl(&self.file, ioctls::SET_FILTER, c.as_ptr().cast_mut()).map_err(|source| {
            TracepointError::Filter {
                filter: filter.into(),
                source,
            }
        })
    }

    /// ENABLE, DISABLE or RESET of this event only (argument 0).
    fn ioctl(
        &self,
        ioctl: unsafe fn(libc::c_int, libc::c_uint) -> libc::c_int,
        what: &'static str,
    ) -> Result<()> {
        perf_ioctl(&self.file, ioctl, 0).map_err(|source| TracepointError::Ioctl { what, source })
    }

    /// Stops (`false`) or resumes (`true`) counting: one ioctl, so a vCPU
    /// thread can switch its counters at a phase marker. Reads keep the
    /// total counted while enabled.
    pub fn set_enabled(&self, on: bool) -> Result<()> {
        if on {
            self.ioctl(ioctls::ENABLE, "PERF_EVENT_IOC_ENABLE")
        } else {
            self.ioctl(ioctls::DISABLE, "PERF_EVENT_IOC_DISABLE")
        }
    }

    /// The number of events counted since the counter was opened.
    pub fn read(&self) -> Result<u64> {
        let mut buf = [0u8; 8];
        (&self.file)
            .read_exact(&mut buf)
            .map_err(TracepointError::Read)?;
        Ok(u64::from_ne_bytes(buf))
    }
}

/// `field == value`, where the field may be called differently on other
/// kernels: the first of `fields` that exists in the event format is used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldEq {
    /// Candidate field names, in order of preference.
    pub fields: Vec<String>,
    /// The value to compare with.
    pub value: u64,
}

impl FieldEq {
    /// `field == value` with alternative field names.
    pub fn new(fields: &[&str], value: u64) -> Self {
        Self {
            fields: fields.iter().map(|s| s.to_string()).collect(),
            value,
        }
    }
}

/// In-kernel filter of a counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Filter {
    /// Count every event.
    None,
    /// Filter text passed as is.
    Raw(String),
    /// Conjunction of field comparisons resolved against the event format.
    Eq(Vec<FieldEq>),
}

impl Filter {
    /// Builds the filter text for an event with format `format`; `Err` is the
    /// reason the filter cannot be built (a field missing on this kernel).
    pub fn build(
        &self,
        event: &str,
        format: Option<&EventFormat>,
    ) -> std::result::Result<Option<String>, String> {
        match self {
            Self::None => Ok(None),
            Self::Raw(s) => Ok(Some(s.clone())),
            Self::Eq(terms) => {
                let format = format.ok_or_else(|| format!("format of {event} unreadable"))?;
                let mut parts = Vec::with_capacity(terms.len());
                for t in terms {
                    let cands: Vec<&str> = t.fields.iter().map(String::as_str).collect();
                    let field = format.first_field(&cands).ok_or_else(|| {
                        format!("event {event} has no field {}", cands.join(" or "))
                    })?;
                    if t.value < 10 {
                        parts.push(format!("{field} == {}", t.value));
                    } else {
                        parts.push(format!("{field} == {:#x}", t.value));
                    }
                }
                Ok(Some(parts.join(" && ")))
            }
        }
    }
}

/// What to count: a name (key of the snapshot), an event and a filter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterSpec {
    /// Key in [`TraceSnapshot`], e.g. `kvm_exit:HLT`.
    pub name: String,
    /// Event system, e.g. `kvm`.
    pub system: String,
    /// Event name, e.g. `kvm_exit`.
    pub event: String,
    /// In-kernel filter.
    pub filter: Filter,
}

impl CounterSpec {
    /// A spec for `system:event` named `name`.
    pub fn new(name: impl Into<String>, system: &str, event: &str, filter: Filter) -> Self {
        Self {
            name: name.into(),
            system: system.into(),
            event: event.into(),
            filter,
        }
    }

    /// An unfiltered `kvm:<event>` counter named `<event>`.
    pub fn kvm(event: &str) -> Self {
        Self::new(event, "kvm", event, Filter::None)
    }
}

/// Whether a counter is counting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum Availability {
    /// Counting.
    Available,
    /// Not counting, and why.
    Unavailable(String),
}

/// Status of one counter of a set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterStatus {
    /// Counter name.
    pub name: String,
    /// `system:event`.
    pub event: String,
    /// Filter text used (if any).
    pub filter: Option<String>,
    /// Available or not, with the reason.
    pub availability: Availability,
}

#[derive(Debug)]
struct Entry {
    status: CounterStatus,
    counter: Option<TracepointCounter>,
}

/// The counters one thread opened for itself.
#[derive(Debug)]
pub struct TracepointSet {
    entries: Vec<Entry>,
}

impl TracepointSet {
    /// Opens every spec on the calling thread. `tracefs` is `None` when it
    /// is not mounted; each counter that cannot be opened is kept as
    /// unavailable with its reason.
    pub fn open(tracefs: Option<&Tracefs>, specs: &[CounterSpec]) -> Self {
        type Parsed = std::result::Result<(u64, std::sync::Arc<EventFormat>), String>;
        let mut formats: HashMap<(String, String), Parsed> = HashMap::new();
        let mut entries = Vec::with_capacity(specs.len());
        for spec in specs {
            let event = format!("{}:{}", spec.system, spec.event);
            let mut status = CounterStatus {
                name: spec.name.clone(),
                event: event.clone(),
                filter: None,
                availability: Availability::Available,
            };
            let mut counter = None;
            let opened = (|| -> std::result::Result<TracepointCounter, String> {
                let tracefs = tracefs.ok_or_else(|| TracefsError::NotMounted.to_string())?;
                let fmt = formats
                    .entry((spec.system.clone(), spec.event.clone()))
                    .or_insert_with(|| {
                        let fmt = tracefs
                            .event_format_shared(&spec.system, &spec.event)
                            .map_err(|e| e.to_string())?;
                        Ok((fmt.id, fmt))
                    })
                    .as_ref()
                    .map_err(Clone::clone)?;
                let filter = spec.filter.build(&event, Some(&fmt.1))?;
                status.filter = filter.clone();
                TracepointCounter::open(fmt.0, filter.as_deref()).map_err(|e| e.reason())
            })();
            match opened {
                Ok(c) => counter = Some(c),
                Err(reason) => status.availability = Availability::Unavailable(reason),
            }
            entries.push(Entry { status, counter });
        }
        Self { entries }
    }

    /// Stops or resumes every open counter (see
    /// [`TracepointCounter::set_enabled`]); the first failure is returned,
    /// after trying them all.
    pub fn set_enabled(&self, on: bool) -> Result<()> {
        let mut first = Ok(());
        for c in self.entries.iter().filter_map(|e| e.counter.as_ref()) {
            if let Err(e) = c.set_enabled(on) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Status of every counter, in spec order.
    pub fn statuses(&self) -> Vec<CounterStatus> {
        self.entries.iter().map(|e| e.status.clone()).collect()
    }

    /// Number of counters that are counting.
    pub fn available(&self) -> usize {
        self.entries.iter().filter(|e| e.counter.is_some()).count()
    }

    /// Reads every available counter. A counter whose read fails is left
    /// out of the snapshot (and logged).
    pub fn read_all(&self) -> TraceSnapshot {
        let mut values = BTreeMap::new();
        for e in &self.entries {
            if let Some(c) = &e.counter {
                match c.read() {
                    Ok(v) => {
                        values.insert(e.status.name.clone(), v);
                    }
                    Err(err) => log::warn!("tracepoint counter {}: {err}", e.status.name),
                }
            }
        }
        TraceSnapshot { values }
    }
}

/// Counter values at one instant (available counters only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TraceSnapshot {
    /// Counter name -> events counted since the set was opened.
    pub values: BTreeMap<String, u64>,
}

impl TraceSnapshot {
    /// The value of counter `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.values.get(name).copied()
    }

    /// Events between `earlier` and `self`, per counter present in `self`
    /// (a counter missing from `earlier` counts from 0).
    pub fn delta(&self, earlier: &TraceSnapshot) -> BTreeMap<String, u64> {
        self.values
            .iter()
            .map(|(k, &v)| {
                let before = earlier.values.get(k).copied().unwrap_or(0);
                (k.clone(), v.saturating_sub(before))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit_reasons::Isa;
    use crate::specs::{kvm_specs, ExitReasonSelection};
    use crate::tracefs::mount_tracefs;

    #[test]
    fn the_attr_we_pass_fits_the_size_we_declare() {
        let a = tracepoint_attr(42);
        assert!(std::mem::size_of::<PerfEventAttr>() >= a.size as usize);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, sample_max_stack), 108);
        assert_eq!(
            (a.type_, a.config, a.disabled()),
            (PERF_TYPE_TRACEPOINT, 42, 1)
        );
    }

    #[test]
    fn snapshot_delta() {
        let a = TraceSnapshot {
            values: [("x".to_string(), 5), ("y".to_string(), 9)].into(),
        };
        let b = TraceSnapshot {
            values: [
                ("x".to_string(), 8),
                ("z".to_string(), 2),
                ("y".to_string(), 3),
            ]
            .into(),
        };
        let d = b.delta(&a);
        assert_eq!(d["x"], 3);
        assert_eq!(d["z"], 2);
        assert_eq!(d["y"], 0);
        assert_eq!(b.get("z"), Some(2));
    }

    #[test]
    fn set_without_tracefs_is_all_unavailable() {
        let specs = kvm_specs(Some(Isa::Vmx), &ExitReasonSelection::None);
        let set = TracepointSet::open(None, &specs);
        assert_eq!(set.available(), 0);
        for s in set.statuses() {
            assert_eq!(
                s.availability,
                Availability::Unavailable(
                    "tracefs not mounted (use --mount-tracefs: VmConfig::mount_tracefs = true)"
                        .into()
                )
            );
        }
        assert!(set.read_all().values.is_empty());
    }

    /// Tracefs for live tests: mounts it (we run as root) if needed.
    fn live_tracefs() -> Option<Tracefs> {
        match mount_tracefs() {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("skipping live tracepoint test: {e}");
                None
            }
        }
    }

    fn getpid_id(t: &Tracefs) -> Option<u64> {
        match t.event_id("syscalls", "sys_enter_getpid") {
            Ok(id) => Some(id),
            Err(e) => {
                eprintln!("skipping: {e}");
                None
            }
        }
    }

    fn getpid_n(n: u64) {
        for _ in 0..n {
            // SAFETY: getpid has no arguments and no side effects.
            unsafe { libc::syscall(libc::SYS_getpid) };
        }
    }

    fn open_or_skip(id: u64, filter: Option<&str>) -> Option<TracepointCounter> {
        match TracepointCounter::open(id, filter) {
            Ok(c) => Some(c),
            Err(e @ TracepointError::Open { .. }) => {
                eprintln!("skipping live tracepoint test: {}", e.reason());
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn counts_exactly_the_calling_threads_syscalls() {
        let Some(t) = live_tracefs() else { return };
        let Some(id) = getpid_id(&t) else { return };
        let Some(c) = open_or_skip(id, None) else {
            return;
        };
        assert_eq!(c.read().unwrap(), 0);
        getpid_n(1000);
        assert_eq!(c.read().unwrap(), 1000);
        // Another thread's getpid calls are not counted here.
        std::thread::spawn(|| getpid_n(500)).join().unwrap();
        assert_eq!(c.read().unwrap(), 1000);
        getpid_n(7);
        assert_eq!(c.read().unwrap(), 1007);
        // Switched off, nothing is counted; back on, counting resumes.
        c.set_enabled(false).unwrap();
        getpid_n(100);
        assert_eq!(c.read().unwrap(), 1007);
        c.set_enabled(true).unwrap();
        getpid_n(3);
        assert_eq!(c.read().unwrap(), 1010);
    }

    #[test]
    fn filter_is_applied_in_kernel() {
        let Some(t) = live_tracefs() else { return };
        let Some(id) = getpid_id(&t) else { return };
        let nr = libc::SYS_getpid;
        let Some(yes) = open_or_skip(id, Some(&format!("__syscall_nr == {nr}"))) else {
            return;
        };
        let no = TracepointCounter::open(id, Some("__syscall_nr == 1")).unwrap();
        getpid_n(300);
        assert_eq!(yes.read().unwrap(), 300);
        assert_eq!(no.read().unwrap(), 0);
    }

    #[test]
    fn bad_filter_and_missing_event_are_unavailable_with_reason() {
        let Some(t) = live_tracefs() else { return };
        let Some(id) = getpid_id(&t) else { return };
        if open_or_skip(id, None).is_none() {
            return;
        }
        let e = TracepointCounter::open(id, Some("no_such_field == 1")).unwrap_err();
        assert!(matches!(e, TracepointError::Filter { .. }), "{e}");
        assert!(
            e.reason().contains("kernel rejected filter"),
            "{}",
            e.reason()
        );
        let e = TracepointCounter::open(id, Some("a\0b")).unwrap_err();
        assert!(matches!(e, TracepointError::FilterNul(_)));
        let e = TracepointCounter::open(u64::from(u32::MAX) + 77, None).unwrap_err();
        assert!(matches!(e, TracepointError::Open { .. }), "{e}");

        let specs = [
            CounterSpec::new("getpid", "syscalls", "sys_enter_getpid", Filter::None),
            CounterSpec::kvm("kvm_no_such_event"),
            CounterSpec::new(
                "bad",
                "syscalls",
                "sys_enter_getpid",
                Filter::Raw("no_such_field == 1".into()),
            ),
            CounterSpec::new(
                "missing_field",
                "syscalls",
                "sys_enter_getpid",
                Filter::Eq(vec![FieldEq::new(&["nope"], 3)]),
            ),
        ];
        let set = TracepointSet::open(Some(&t), &specs);
        let st = set.statuses();
        assert_eq!(st[0].availability, Availability::Available);
        assert_eq!(
            st[1].availability,
            Availability::Unavailable(
                "event kvm:kvm_no_such_event does not exist on this kernel".into()
            )
        );
        assert!(
            matches!(&st[2].availability, Availability::Unavailable(r) if r.contains("rejected")),
            "{:?}",
            st[2]
        );
        assert!(
            matches!(&st[3].availability, Availability::Unavailable(r) if r.contains("no field nope")),
            "{:?}",
            st[3]
        );
        assert_eq!(set.available(), 1);
        let s0 = set.read_all();
        getpid_n(25);
        let d = set.read_all().delta(&s0);
        assert_eq!(d.len(), 1);
        assert_eq!(d["getpid"], 25);
    }

    #[test]
    fn kvm_specs_open_on_this_kernel() {
        let Some(t) = live_tracefs() else { return };
        if !t.has_event("kvm", "kvm_apic_ipi") {
            eprintln!("skipping: kvm module not loaded (no kvm:* events)");
            return;
        }
        let specs = kvm_specs(Some(Isa::Svm), &ExitReasonSelection::All);
        let set = TracepointSet::open(Some(&t), &specs);
        if set.available() == 0 {
            eprintln!("skipping: {:?}", set.statuses()[0].availability);
            return;
        }
        // Every counter whose event exists must be accepted, filters included.
        for s in set.statuses() {
            let ev = s.event.trim_start_matches("kvm:");
            if t.has_event("kvm", ev) {
                assert_eq!(s.availability, Availability::Available, "{s:?}");
            } else {
                assert!(matches!(s.availability, Availability::Unavailable(_)));
            }
        }
        // No VM runs on this thread: nothing counted.
        assert!(set.read_all().values.values().all(|&v| v == 0));
    }

    /// Runs a real-mode guest doing `out 0x3f8, al; hlt` on a fresh thread
    /// that opened the kvm:* counters for itself; the main thread's counters
    /// must see nothing.
    #[test]
    #[cfg(feature = "kvm")]
    fn kvm_events_are_counted_on_the_vcpu_thread() {
        use kvm_ioctls::{Kvm, VcpuExit};
        let Some(t) = live_tracefs() else { return };
        if !t.has_event("kvm", "kvm_pio") {
            eprintln!("skipping: no kvm:* events");
            return;
        }
        let Ok(kvm) = Kvm::new() else {
            eprintln!("skipping: cannot open /dev/kvm");
            return;
        };
        let mut specs = kvm_specs(None, &ExitReasonSelection::None);
        specs.extend(crate::specs::context_specs());
        let main_set = TracepointSet::open(Some(&t), &specs);
        if main_set.available() == 0 {
            eprintln!("skipping: {:?}", main_set.statuses()[0].availability);
            return;
        }
        let main0 = main_set.read_all();
        let vm = kvm.create_vm().unwrap();
        const MEM: usize = 0x10000;
        // SAFETY: anonymous private mapping, checked for MAP_FAILED below.
        let host = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MEM,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(host, libc::MAP_FAILED);
        let code = [0xba, 0xf8, 0x03, 0xb0, b'a', 0xee, 0xf4]; // mov dx,0x3f8; mov al,'a'; out dx,al; hlt
                                                               // SAFETY: the mapping is MEM bytes long and code fits at 0x1000.
        unsafe {
            std::ptr::copy_nonoverlapping(code.as_ptr(), (host as *mut u8).add(0x1000), code.len())
        };
        let region = kvm_bindings::kvm_userspace_memory_region {
            slot: 0,
            flags: 0,
            guest_phys_addr: 0,
            memory_size: MEM as u64,
            userspace_addr: host as u64,
        };
        // SAFETY: the region is backed by the mapping above, which outlives the VM.
        unsafe { vm.set_user_memory_region(region).unwrap() };
        let mut vcpu = vm.create_vcpu(0).unwrap();
        let mut sregs = vcpu.get_sregs().unwrap();
        sregs.cs.base = 0;
        sregs.cs.selector = 0;
        vcpu.set_sregs(&sregs).unwrap();
        let mut regs = vcpu.get_regs().unwrap();
        regs.rip = 0x1000;
        regs.rflags = 2;
        vcpu.set_regs(&regs).unwrap();
        let mut stats =
            crate::kvm_stats::StatsReader::new(crate::kvm_stats::stats_fd(&vcpu).unwrap()).unwrap();
        let stats0 = stats.snapshot().unwrap();
        let tracefs = t.clone();
        let (delta, exits) = std::thread::spawn(move || {
            let set = TracepointSet::open(Some(&tracefs), &specs);
            let s0 = set.read_all();
            let mut exits = Vec::new();
            for _ in 0..4 {
                match vcpu.run() {
                    Ok(VcpuExit::IoOut(port, data)) => exits.push(format!("io {port:#x} {data:?}")),
                    Ok(VcpuExit::Hlt) => {
                        exits.push("hlt".to_string());
                        break;
                    }
                    Ok(other) => {
                        exits.push(format!("{other:?}"));
                        break;
                    }
                    Err(e) => {
                        exits.push(format!("error {e}"));
                        break;
                    }
                }
            }
            (set.read_all().delta(&s0), exits)
        })
        .join()
        .unwrap();
        drop(vm);
        // SAFETY: unmapping the region mapped above; the VM and vCPU are gone.
        unsafe { libc::munmap(host, MEM) };
        assert_eq!(
            exits,
            ["io 0x3f8 [97]", "hlt"],
            "guest did not run as expected"
        );
        assert_eq!(delta["kvm_pio"], 1, "{delta:?}");
        assert_eq!(delta["kvm_userspace_exit"], 2, "{delta:?}");
        assert_eq!(delta["kvm_apic_ipi"], 0);
        let sd = stats.snapshot().unwrap().delta(&stats0);
        eprintln!("vCPU stats delta: {sd:?}");
        assert!(sd["exits"] >= 2, "{sd:?}");
        assert_eq!(sd["halt_exits"], 1, "{sd:?}");
        // Under kvm_pvm the OUT is emulated (insn_emulation) and io_exits
        // stays 0; on VMX/SVM hardware it is a real IO exit.
        assert!(sd["io_exits"] <= 1, "{sd:?}");
        assert!(sd["io_exits"] + sd["insn_emulation"] >= 1, "{sd:?}");
        // Only VM-wide work done by the creating (main) thread shows up
        // there: KVM_CREATE_VM without an irqchip sets the ABSENT inhibit.
        let main = main_set.read_all().delta(&main0);
        assert!(
            main.iter()
                .all(|(k, &v)| v == 0 || k == "kvm_apicv_inhibit_changed"),
            "main thread counted {main:?}"
        );
    }
}
