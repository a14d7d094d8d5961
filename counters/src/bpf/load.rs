//! Loading and attaching the exit counter, and the vCPU threads' handles.

use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aya::maps::{Array, HashMap, MapData};
use aya::programs::{RawTracePoint, TracePoint};
use aya::{Ebpf, EbpfLoader};

use super::layout::{
    Config, EventCounter, InhibitLog, VcpuCounts, EVENT_COUNTERS, EXITS_COUNTER, INHIBIT_ARGS,
    INHIBIT_LOG, VCPU_BYTES,
};
use super::window::BpfSnapshot;
use crate::exit_reasons::Isa;
use crate::sampler::InhibitChange;
use crate::tracefs::{EventFormat, Tracefs};
use std::collections::BTreeMap;

/// Why the exit counter could not be used (each message says what to do).
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// Built without clang.
    #[error("BPF exit counter not built: {0}")]
    NotBuilt(&'static str),
    /// The tracepoint's format lacks the field, or it is not a u32.
    #[error("{event} has no u32 field {field}")]
    Field {
        /// `system:event`.
        event: String,
        /// The field wanted.
        field: String,
    },
    /// Reading tracefs failed.
    #[error("tracefs: {0}")]
    Tracefs(#[from] crate::tracefs::TracefsError),
    /// The kernel refused to load or verify the programs or maps.
    #[error("loading the BPF exit counter failed: {0} (needs root or CAP_BPF+CAP_PERFMON, and a kernel with BPF)")]
    Load(String),
    /// The kernel refused to attach a program.
    #[error("attaching the BPF exit counter to {what} failed: {why}")]
    Attach {
        /// The attach point.
        what: String,
        /// The kernel's answer.
        why: String,
    },
    /// The loaded maps do not have the layout this crate reads.
    #[error("BPF map {0} has an unexpected layout (object and crate disagree)")]
    Layout(&'static str),
    /// More vCPU threads registered than the maps were sized for.
    #[error("BPF exit counter sized for {0} vCPU threads, all registered")]
    Full(usize),
    /// A map operation failed.
    #[error("BPF map {what}: {why}")]
    Map {
        /// The map and operation.
        what: &'static str,
        /// The kernel's answer.
        why: String,
    },
}

/// Where the programs attach: `kvm:kvm_exit` and `kvm_entry` for real; the
/// tests use tracepoints that fire on any host.
#[derive(Debug, Clone)]
pub struct Attach {
    /// The tracepoint whose record carries the reason (system, event).
    pub exit: (String, String),
    /// The reason field's names (the first that exists is read; a u32).
    pub reason: Vec<String>,
    /// The ISA field's names (none: the host's ISA is assumed).
    pub isa: Vec<String>,
    /// The raw tracepoint that ends an exit (re-entry).
    pub entry: String,
    /// Attach the event counters ([`EVENT_COUNTERS`]) too.
    pub events: bool,
}

impl Attach {
    /// `kvm:kvm_exit` (`exit_reason`, `isa`) and `kvm_entry`.
    pub fn kvm() -> Self {
        Self {
            exit: ("kvm".into(), "kvm_exit".into()),
            reason: vec!["exit_reason".into()],
            isa: vec!["isa".into()],
            entry: "kvm_entry".into(),
            events: true,
        }
    }

    fn config(&self, format: &EventFormat, isa: Option<Isa>) -> Result<Config, BpfError> {
        let u32_field = |names: &[String]| {
            names.iter().find_map(|n| {
                let f = format.field(n)?;
                (f.size == 4).then_some(f.offset)
            })
        };
        let event = format!("{}:{}", self.exit.0, self.exit.1);
        let reason_offset = u32_field(&self.reason).ok_or_else(|| BpfError::Field {
            event: event.clone(),
            field: self.reason.join(" or "),
        })?;
        Ok(Config {
            reason_offset,
            isa_offset: u32_field(&self.isa).unwrap_or(0),
            default_isa: isa.map_or(0, |i| i as u32),
            tgid: std::process::id(),
        })
    }
}

/// A map's memory, shared with the kernel.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; each element is read and
// written only by the thread that registered it (BpfThread, not Clone),
// and by the BPF program running in that same thread's context.
unsafe impl Send for Mapping {}
// SAFETY: as above: no element is touched by two threads.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; no BpfThread
        // outlives the BpfExits that owns this (they hold an Arc of it).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The exit counter of one run: programs loaded and attached, maps sized
/// for `capacity` vCPU threads. Detached when dropped.
pub struct BpfExits {
    // Field order is drop order: the mapping before the maps and programs.
    mapping: Mapping,
    threads: Mutex<HashMap<MapData, u32, u32>>,
    ebpf: Mutex<Ebpf>,
    capacity: usize,
    next: AtomicUsize,
    isa: Option<Isa>,
    counters: Vec<&'static str>,
    unavailable: Vec<(&'static str, String)>,
    /// The inhibit log's memory and the reason names, when attached.
    inhibits: Option<(Mapping, BTreeMap<u32, String>)>,
    why_no_inhibits: Option<String>,
}

impl std::fmt::Debug for BpfExits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpfExits")
            .field("capacity", &self.capacity)
            .field("registered", &self.next.load(Ordering::Relaxed))
            .finish()
    }
}

fn load_err(e: impl std::fmt::Display) -> BpfError {
    BpfError::Load(e.to_string())
}

fn map_err(what: &'static str) -> impl Fn(aya::maps::MapError) -> BpfError {
    move |e| BpfError::Map {
        what,
        why: e.to_string(),
    }
}

impl BpfExits {
    /// Loads the counter for `capacity` vCPU threads on `kvm:kvm_exit` /
    /// `kvm_entry` (`isa`: the host's, for records without an `isa` field).
    pub fn load_kvm(
        tracefs: &Tracefs,
        capacity: usize,
        isa: Option<Isa>,
    ) -> Result<Self, BpfError> {
        Self::load(tracefs, &Attach::kvm(), capacity, isa)
    }

    /// Loads the counter and attaches it to `at`.
    pub fn load(
        tracefs: &Tracefs,
        at: &Attach,
        capacity: usize,
        isa: Option<Isa>,
    ) -> Result<Self, BpfError> {
        let object = super::object().map_err(BpfError::NotBuilt)?;
        let format = tracefs.event_format_shared(&at.exit.0, &at.exit.1)?;
        let config = at.config(&format, isa)?;
        let capacity = capacity.max(1);
        let entries = u32::try_from(capacity).map_err(|_| BpfError::Full(capacity))?;
        let mut ebpf = EbpfLoader::new()
            .set_max_entries("THREADS", entries)
            .set_max_entries("VCPUS", entries)
            .load(object)
            .map_err(load_err)?;
        {
            let mut cfg: Array<_, Config> = ebpf
                .map_mut("CONFIG")
                .ok_or(BpfError::Layout("CONFIG"))?
                .try_into()
                .map_err(|_| BpfError::Layout("CONFIG"))?;
            cfg.set(0, config, 0).map_err(map_err("CONFIG set"))?;
        }
        let vcpus = ebpf.map("VCPUS").ok_or(BpfError::Layout("VCPUS"))?;
        let aya::maps::Map::Array(data) = vcpus else {
            return Err(BpfError::Layout("VCPUS"));
        };
        let info = data.info().map_err(map_err("VCPUS info"))?;
        if info.value_size() as usize != VCPU_BYTES {
            return Err(BpfError::Layout("VCPUS"));
        }
        let mapping = map_array(data, capacity * VCPU_BYTES, "VCPUS mmap")?;
        let threads = ebpf
            .take_map("THREADS")
            .ok_or(BpfError::Layout("THREADS"))?;
        let threads: HashMap<MapData, u32, u32> = threads
            .try_into()
            .map_err(|_| BpfError::Layout("THREADS"))?;
        attach(&mut ebpf, at)?;
        let (mut counters, unavailable) = if at.events {
            attach_events(&mut ebpf, tracefs)
        } else {
            (Vec::new(), Vec::new())
        };
        counters.push(EXITS_COUNTER);
        let (inhibits, why_no_inhibits) = if at.events {
            match attach_inhibits(&mut ebpf, tracefs) {
                Ok(i) => (Some(i), None),
                Err(why) => (None, Some(why)),
            }
        } else {
            (None, Some("not asked for".into()))
        };
        Ok(Self {
            mapping,
            threads: Mutex::new(threads),
            ebpf: Mutex::new(ebpf),
            capacity,
            next: AtomicUsize::new(0),
            isa,
            counters,
            unavailable,
            inhibits,
            why_no_inhibits,
        })
    }

    /// Registers the calling thread (a vCPU thread, before its first
    /// KVM_RUN): its exits are counted in its own element from now on,
    /// while its switch is on (it starts off).
    pub fn register(self: &Arc<Self>) -> Result<BpfThread, BpfError> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        if index >= self.capacity {
            return Err(BpfError::Full(self.capacity));
        }
        let tid = rustix::thread::gettid()
            .as_raw_nonzero()
            .get()
            .unsigned_abs();
        let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        // usize -> u32 cannot fail: capacity fit in a u32 at load.
        threads
            .insert(tid, index as u32, 0)
            .map_err(map_err("THREADS insert"))?;
        Ok(BpfThread {
            exits: self.clone(),
            index,
            tid,
        })
    }

    /// The tracepoint counters this object keeps per vCPU thread (names as
    /// `crate::specs` gives them; the `kvm_exit` total among them): a run
    /// needs no perf counter for these.
    pub fn counters(&self) -> &[&'static str] {
        &self.counters
    }

    /// Event counters that could not be attached, with why (their perf
    /// counters are needed instead).
    pub fn unavailable(&self) -> &[(&'static str, String)] {
        &self.unavailable
    }

    /// Whether every APICv inhibit change of this process is logged (from
    /// the load on: load before creating the VM), else why not.
    pub fn logs_inhibits(&self) -> Result<(), &str> {
        match (&self.inhibits, &self.why_no_inhibits) {
            (Some(_), _) => Ok(()),
            (None, why) => Err(why.as_deref().unwrap_or("not attached")),
        }
    }

    /// Every APICv inhibit change logged so far, oldest first, with the
    /// number of changes past the log's room, and the reason names (None:
    /// not logged). Read when the vCPU threads are done.
    pub fn inhibit_changes(&self) -> Option<(Vec<InhibitChange>, u64, &BTreeMap<u32, String>)> {
        let (m, names) = self.inhibits.as_ref()?;
        // SAFETY: the mapping is one InhibitLog (checked at load), plain
        // integers; the program only appends, each entry complete before
        // the thread that wrote it went on.
        let log: InhibitLog = unsafe { m.ptr.as_ptr().cast::<InhibitLog>().read_volatile() };
        let n = usize::try_from(log.next).unwrap_or(usize::MAX);
        let mut changes: Vec<InhibitChange> = log.entries[..n.min(INHIBIT_LOG)]
            .iter()
            .map(|e| InhibitChange {
                time_ns: e.time_ns,
                reason: e.reason,
                set: e.set != 0,
                inhibits: e.inhibits,
            })
            .collect();
        changes.sort_by_key(|c| c.time_ns);
        Some((changes, log.next.saturating_sub(INHIBIT_LOG as u64), names))
    }

    /// How many vCPU threads the maps hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Runs so far of each program (the kernel's `run_cnt`; counted only
    /// while `kernel.bpf_stats_enabled` is 1): (exit, entry).
    pub fn run_counts(&self) -> (Option<u64>, Option<u64>) {
        let ebpf = self.ebpf.lock().unwrap_or_else(|p| p.into_inner());
        let count = |name| {
            ebpf.program(name)
                .and_then(|p| p.info().ok())
                .map(|i| i.run_count())
        };
        (count("on_exit"), count("on_entry"))
    }

    fn element(&self, index: usize) -> *mut VcpuCounts {
        debug_assert!(index < self.capacity);
        // SAFETY: index < capacity, and the mapping holds capacity elements
        // of VCPU_BYTES (checked against the map's value size at load).
        unsafe { self.mapping.ptr.as_ptr().add(index * VCPU_BYTES).cast() }
    }
}

fn map_array(data: &MapData, bytes: usize, what: &'static str) -> Result<Mapping, BpfError> {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let len = bytes.div_ceil(page) * page;
    let fd = data.fd().as_fd_raw();
    // SAFETY: a fresh shared mapping of the BPF_F_MMAPABLE array's fd; the
    // kernel checks the length against the map. Nothing else aliases it.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(BpfError::Map {
            what,
            why: std::io::Error::last_os_error().to_string(),
        });
    }
    let ptr = NonNull::new(ptr.cast()).ok_or(BpfError::Layout("VCPUS"))?;
    Ok(Mapping { ptr, len })
}

trait RawMapFd {
    fn as_fd_raw(&self) -> i32;
}

impl RawMapFd for aya::maps::MapFd {
    fn as_fd_raw(&self) -> i32 {
        use std::os::fd::AsFd;
        self.as_fd().as_raw_fd()
    }
}

fn attach(ebpf: &mut Ebpf, at: &Attach) -> Result<(), BpfError> {
    let what = format!("{}:{}", at.exit.0, at.exit.1);
    let attach_err = |what: &str| {
        let what = what.to_string();
        move |e: aya::programs::ProgramError| BpfError::Attach {
            what: what.clone(),
            why: e.to_string(),
        }
    };
    let exit: &mut TracePoint = ebpf
        .program_mut("on_exit")
        .ok_or(BpfError::Layout("on_exit"))?
        .try_into()
        .map_err(|_| BpfError::Layout("on_exit"))?;
    exit.load().map_err(load_err)?;
    exit.attach(&at.exit.0, &at.exit.1)
        .map_err(attach_err(&what))?;
    let entry: &mut RawTracePoint = ebpf
        .program_mut("on_entry")
        .ok_or(BpfError::Layout("on_entry"))?
        .try_into()
        .map_err(|_| BpfError::Layout("on_entry"))?;
    entry.load().map_err(load_err)?;
    entry
        .attach(&at.entry)
        .map_err(attach_err(&format!("raw tracepoint {}", at.entry)))?;
    Ok(())
}

/// Attaches the event counters whose event exists and whose arguments are
/// where the programs read them: (attached counter names, the others with why).
fn attach_events(
    ebpf: &mut Ebpf,
    tracefs: &Tracefs,
) -> (Vec<&'static str>, Vec<(&'static str, String)>) {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    let mut done: Vec<(&str, Result<(), String>)> = Vec::new();
    for e in EVENT_COUNTERS {
        let r = match done.iter().find(|(p, _)| *p == e.program) {
            Some((_, r)) => r.clone(),
            None => {
                let r = attach_event(ebpf, tracefs, e);
                done.push((e.program, r.clone()));
                r
            }
        };
        match r {
            Ok(()) => ok.push(e.name),
            Err(why) => bad.push((e.name, why)),
        }
    }
    (ok, bad)
}

fn attach_event(ebpf: &mut Ebpf, tracefs: &Tracefs, e: &EventCounter) -> Result<(), String> {
    let format = tracefs
        .event_format_shared("kvm", e.event)
        .map_err(|err| err.to_string())?;
    let fields: Vec<&str> = format
        .fields
        .iter()
        .filter(|f| !f.common)
        .map(|f| f.name.as_str())
        .collect();
    if !fields.starts_with(e.args) {
        return Err(format!(
            "kvm:{}'s fields are ({}), not ({}, ...) as the BPF program reads its arguments",
            e.event,
            fields.join(", "),
            e.args.join(", ")
        ));
    }
    let prog: &mut RawTracePoint = ebpf
        .program_mut(e.program)
        .ok_or("not in the BPF object")?
        .try_into()
        .map_err(|_| "not a raw tracepoint program".to_string())?;
    prog.load().map_err(|err| err.to_string())?;
    prog.attach(e.event).map_err(|err| err.to_string())?;
    Ok(())
}

/// Attaches the inhibit log: (its mapping, the reason names) or why not.
fn attach_inhibits(
    ebpf: &mut Ebpf,
    tracefs: &Tracefs,
) -> Result<(Mapping, BTreeMap<u32, String>), String> {
    let event = "kvm_apicv_inhibit_changed";
    let format = tracefs
        .event_format_shared("kvm", event)
        .map_err(|e| e.to_string())?;
    let fields: Vec<&str> = format
        .fields
        .iter()
        .filter(|f| !f.common)
        .map(|f| f.name.as_str())
        .collect();
    if !fields.starts_with(INHIBIT_ARGS) {
        return Err(format!(
            "kvm:{event}'s fields are ({}), not ({}, ...)",
            fields.join(", "),
            INHIBIT_ARGS.join(", ")
        ));
    }
    let Some(aya::maps::Map::Array(data)) = ebpf.map("INHIBITS") else {
        return Err("no INHIBITS map in the BPF object".into());
    };
    let info = data.info().map_err(|e| e.to_string())?;
    if info.value_size() as usize != std::mem::size_of::<InhibitLog>() {
        return Err("INHIBITS has an unexpected layout".into());
    }
    let mapping = map_array(data, std::mem::size_of::<InhibitLog>(), "INHIBITS mmap")
        .map_err(|e| e.to_string())?;
    let prog: &mut RawTracePoint = ebpf
        .program_mut("on_inhibit_changed")
        .ok_or("no on_inhibit_changed in the BPF object")?
        .try_into()
        .map_err(|_| "on_inhibit_changed is not a raw tracepoint program".to_string())?;
    prog.load().map_err(|e| e.to_string())?;
    prog.attach(event).map_err(|e| e.to_string())?;
    let names = crate::sampler::inhibit_names(&format.print_fmt)
        .or_else(|| {
            let release = ipivmm_host::facts::kernel_release();
            crate::sampler::inhibit::fallback_inhibit_names(&release)
        })
        .unwrap_or_default();
    Ok((mapping, names))
}

/// One vCPU thread's element: its switch and snapshots. Used only by the
/// thread that registered it (not Clone; Send so it can be stored, but the
/// counts are those of the registering thread).
pub struct BpfThread {
    exits: Arc<BpfExits>,
    index: usize,
    tid: u32,
}

impl std::fmt::Debug for BpfThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpfThread")
            .field("index", &self.index)
            .field("tid", &self.tid)
            .finish()
    }
}

impl BpfThread {
    /// Turns counting of this thread's exits on or off: one store into the
    /// shared map, no syscall. The exit in progress (this thread is in
    /// userspace, handling it) is left untimed.
    pub fn set_counting(&mut self, on: bool) {
        let e = self.exits.element(self.index);
        // SAFETY: our own element (see Mapping); the BPF program runs for
        // this thread only while it is in KVM_RUN, not now.
        unsafe {
            std::ptr::addr_of_mut!((*e).pending).write_volatile(0);
            std::ptr::addr_of_mut!((*e).counting).write_volatile(u32::from(on));
        }
    }

    /// Whether this thread's exits are being counted.
    pub fn counting(&self) -> bool {
        let e = self.exits.element(self.index);
        // SAFETY: our own element (see Mapping).
        unsafe { std::ptr::addr_of!((*e).counting).read_volatile() != 0 }
    }

    /// Everything counted so far. The exit in progress (the marker this
    /// thread is handling) stays counted and is left untimed, so marker
    /// round trips through userspace never reach a reason's host time.
    pub fn snapshot(&mut self) -> BpfSnapshot {
        let e = self.exits.element(self.index);
        // SAFETY: our own element (see Mapping); VcpuCounts is plain
        // integers, any bit pattern is valid.
        let counts: VcpuCounts = unsafe { e.read_volatile() };
        // SAFETY: as above.
        unsafe { std::ptr::addr_of_mut!((*e).pending).write_volatile(0) };
        BpfSnapshot::new(Box::new(counts), self.exits.isa)
    }

    /// The run's counter (its event counters, `run_counts`).
    pub fn exits(&self) -> &Arc<BpfExits> {
        &self.exits
    }

    /// The index of this thread's element.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for BpfThread {
    fn drop(&mut self) {
        self.set_counting(false);
        let mut threads = self.exits.threads.lock().unwrap_or_else(|p| p.into_inner());
        let _ = threads.remove(&self.tid);
    }
}
