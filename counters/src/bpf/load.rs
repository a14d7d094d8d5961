//! Loading and attaching the exit counter, and the vCPU threads' handles.

use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use aya::maps::{Array, HashMap, MapData};
use aya::programs::trace_point::TracePointLinkId;
use aya::programs::{RawTracePoint, TracePoint};
use aya::{Ebpf, EbpfLoader};

use super::layout::{
    Active, Config, EventCounter, InhibitLog, TidSlot, VcpuCounts, EVENT_COUNTERS, EXITS_COUNTER,
    INHIBIT_ARGS, INHIBIT_LOG, TID_SLOTS, VCPU_BYTES,
};
use super::reason_at::ReasonAt;
use super::window::BpfSnapshot;
use crate::exit_reasons::Isa;
use crate::sampler::InhibitChange;
use crate::tracefs::{EventFormat, Tracefs};
use crate::tracepoint::TracepointAnchor;
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
    /// Which program counts the exits.
    pub exit_program: ExitProgram,
}

/// Which program counts exits, and why that one (reported).
#[derive(Debug, Clone)]
pub enum ExitProgram {
    /// `on_exit`, reading the record of `Attach::exit` (switched off while
    /// no thread counts), with why not the raw program.
    Record {
        /// Why not [`ExitProgram::Raw`].
        why_not_raw: String,
    },
    /// `on_exit_raw`, reading the reason through the first argument's
    /// pointer (no record; attached throughout).
    Raw(RawExit),
    /// None, because the exit tracepoint never fires on this KVM (kvm_pvm):
    /// why. Nothing to count, nothing to pay for at each switch or at the
    /// end (the perf link's grace periods).
    None(String),
}

/// The raw tracepoint that counts exits and where it finds the reason.
#[derive(Debug, Clone)]
pub struct RawExit {
    /// The raw tracepoint (`kvm_exit`), whose arguments are (pointer, isa).
    pub event: String,
    /// How to reach the reason from the pointer.
    pub at: ReasonAt,
    /// Which struct member that is, for the report.
    pub what: &'static str,
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
            exit_program: ExitProgram::Record {
                why_not_raw: "not asked for".into(),
            },
        }
    }

    /// What a run counts on: `kvm_exit` / `kvm_entry`, the exits on the raw
    /// `kvm_exit` where the kernel's BTF says where `isa`'s vendor module
    /// keeps the reason, else on its record; `silent`: why `kvm_exit` never
    /// fires on this KVM, if it does not (no exit program then).
    pub fn for_kvm(isa: Option<Isa>, silent: Option<&str>) -> Self {
        match silent {
            Some(why) => Attach {
                exit_program: ExitProgram::None(why.to_string()),
                ..Attach::kvm()
            },
            None => Attach::kvm_raw(isa),
        }
    }

    /// `kvm()`, counting exits on the raw `kvm_exit` where the kernel's BTF
    /// says where `isa`'s vendor module keeps the reason.
    pub fn kvm_raw(isa: Option<Isa>) -> Self {
        let mut at = Self::kvm();
        let found = isa
            .ok_or_else(|| "the host's ISA is not known".to_string())
            .and_then(ReasonAt::find_in_kernel);
        at.exit_program = match found {
            Ok(r) => ExitProgram::Raw(RawExit {
                event: "kvm_exit".into(),
                at: r,
                what: match r {
                    ReasonAt::Vmx { .. } => "vcpu_vmx's exit_reason",
                    ReasonAt::Svm { .. } => "vcpu_svm's vmcb->control.exit_code",
                },
            }),
            Err(why_not_raw) => ExitProgram::Record { why_not_raw },
        };
        at
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
        let (raw_hops, raw_at, raw_then) = match &self.exit_program {
            ExitProgram::Raw(r) => r.at.hops(),
            _ => (0, 0, 0),
        };
        Ok(Config {
            reason_offset,
            isa_offset: u32_field(&self.isa).unwrap_or(0),
            default_isa: isa.map_or(0, |i| i as u32),
            tgid: std::process::id(),
            raw_hops,
            raw_at,
            raw_then,
            pad: 0,
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

/// The exit program's attachment: attached while at least one registered
/// thread counts (or always, without an anchor).
#[derive(Debug, Default)]
struct Switch {
    /// Registered threads whose switch is on.
    counting: u32,
    /// The exit program's link, while attached.
    link: Option<TracePointLinkId>,
    /// The thread closing the last link: closing a perf event's BPF link
    /// waits for an RCU grace period on newer kernels (13-20 ms here), which
    /// no vCPU thread should wait for; the program is off the tracepoint
    /// before that wait begins.
    closing: Option<std::thread::JoinHandle<()>>,
}

/// What [`BpfExits::attach_counting`] attached: the counters kept in the
/// kernel (names as `crate::specs` gives them) and those whose event did
/// not match, with why.
type Counting = (Vec<&'static str>, Vec<(&'static str, String)>);

/// The exit counter of one run: programs loaded, maps sized for `capacity`
/// vCPU threads; what counts is attached once, by
/// [`BpfExits::attach_counting`] (the inhibit log at load). Detached when
/// dropped.
///
/// While no registered thread counts (every vCPU in an uncounted part),
/// the exit program is detached: `kvm_exit` then builds no record and runs
/// no program, and the raw tracepoint programs return after reading
/// `ACTIVE`. An anchor event keeps `kvm_exit` registered with perf, so
/// detaching its program is not a last close (no tracepoint
/// unregistration) and attaching it again registers nothing.
pub struct BpfExits {
    // Field order is drop order: the mappings before the maps and programs,
    // the programs before the anchor.
    mapping: Mapping,
    active: Mapping,
    /// `TIDS`: written under `threads`' lock.
    tids: Mapping,
    threads: Mutex<HashMap<MapData, u32, u32>>,
    switch: Mutex<Switch>,
    ebpf: Mutex<Ebpf>,
    /// Record mode only: keeps kvm_exit registered while its program is off.
    /// Opened by attach_counting, before the programs: an anchor opened
    /// at the load would register `kvm_exit` with perf while the uncounted
    /// part runs.
    anchor: OnceLock<Result<TracepointAnchor, String>>,
    /// Which program counts exits.
    exit_program: ExitProgram,
    /// The exit program's tracepoint (system, event).
    exit_at: (String, String),
    /// Where the counting programs attach, and the tracefs that says how.
    at: Attach,
    tracefs: Tracefs,
    capacity: usize,
    next: AtomicUsize,
    isa: Option<Isa>,
    /// Once attached ([`BpfExits::attach_counting`]): the counters kept in
    /// the kernel and the event counters that could not be attached, or
    /// why nothing counts.
    counting: OnceLock<Result<Counting, String>>,
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

impl Drop for BpfExits {
    fn drop(&mut self) {
        // The last link finishes closing before the maps and the anchor go.
        self.settle();
    }
}

/// An aya loader that has not read the kernel's BTF. aya 0.13's
/// `EbpfLoader::new` reads and parses all of `/sys/kernel/btf/vmlinux`
/// (5.5 MB here: +16 MiB of peak RSS, 10-40 ms) even when `.btf(None)`
/// follows, and nothing here needs it (no CO-RE relocation). So it is
/// created on a thread of its own whose root directory is `/dev` (after
/// `unshare(CLONE_FS)`, the thread's root is its own), where it finds no
/// BTF. Where that is refused (no CAP_SYS_CHROOT), the loader reads it as
/// before.
fn loader_without_kernel_btf() -> EbpfLoader<'static> {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare(CLONE_FS) gives this thread its own root and
            // working directory; chroot changes only them. The thread ends
            // right after the loader is made, and no file descriptor is
            // opened through the changed root but the loader's failed read.
            unsafe {
                if libc::unshare(libc::CLONE_FS) == 0 {
                    let _ = libc::chroot(c"/dev".as_ptr());
                }
            }
            EbpfLoader::new()
        })
        .join()
        .unwrap_or_else(|_| EbpfLoader::new())
    })
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
    /// Loads the counter for `capacity` vCPU threads on `at` (`isa`: the
    /// host's, for records without an `isa` field) with only the APICv
    /// inhibit log attached: the programs are loaded (verified), and a
    /// vCPU's exits take the kernel path they take with nothing loaded until
    /// [`BpfExits::attach_counting`] attaches what counts. Where the raw
    /// exit program fails to load, the record-reading one counts instead
    /// (and the report says why).
    pub fn load(
        tracefs: &Tracefs,
        at: &Attach,
        capacity: usize,
        isa: Option<Isa>,
    ) -> Result<Self, BpfError> {
        match Self::load_as(tracefs, at, capacity, isa) {
            Err(e) if matches!(at.exit_program, ExitProgram::Raw(_)) => {
                let at = Attach {
                    exit_program: ExitProgram::Record {
                        why_not_raw: format!("the raw {} program failed: {e}", at.exit.1),
                    },
                    ..at.clone()
                };
                Self::load_as(tracefs, &at, capacity, isa)
            }
            r => r,
        }
    }

    /// [`BpfExits::load`] of exactly `at`'s programs.
    fn load_as(
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
        // No CO-RE relocations (the programs read records at offsets from
        // tracefs, vCPU fields at offsets from module BTF, and maps): none
        // are applied. (aya 0.13's loader still parses the kernel's BTF when
        // it is created, 10-40 ms; 0.15 does it lazily but needs Rust 1.98.)
        let mut ebpf = loader_without_kernel_btf()
            .btf(None)
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
        let Some(aya::maps::Map::Array(data)) = ebpf.map("ACTIVE") else {
            return Err(BpfError::Layout("ACTIVE"));
        };
        let info = data.info().map_err(map_err("ACTIVE info"))?;
        if info.value_size() as usize != std::mem::size_of::<Active>() {
            return Err(BpfError::Layout("ACTIVE"));
        }
        let active = map_array(data, std::mem::size_of::<Active>(), "ACTIVE mmap")?;
        let Some(aya::maps::Map::Array(data)) = ebpf.map("TIDS") else {
            return Err(BpfError::Layout("TIDS"));
        };
        let info = data.info().map_err(map_err("TIDS info"))?;
        if info.value_size() as usize != std::mem::size_of::<TidSlot>()
            || info.max_entries() as usize != TID_SLOTS
        {
            return Err(BpfError::Layout("TIDS"));
        }
        let tids = map_array(
            data,
            TID_SLOTS * std::mem::size_of::<TidSlot>(),
            "TIDS mmap",
        )?;
        let threads = ebpf
            .take_map("THREADS")
            .ok_or(BpfError::Layout("THREADS"))?;
        let threads: HashMap<MapData, u32, u32> = threads
            .try_into()
            .map_err(|_| BpfError::Layout("THREADS"))?;
        // Verified now, attached by attach_counting.
        load_programs(&mut ebpf, at)?;
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
            active,
            tids,
            threads: Mutex::new(threads),
            // Attached until every thread has been on and off once: threads
            // start off, and the first to switch on then finds it attached.
            switch: Mutex::new(Switch::default()),
            ebpf: Mutex::new(ebpf),
            anchor: OnceLock::new(),
            exit_program: at.exit_program.clone(),
            exit_at: at.exit.clone(),
            at: at.clone(),
            tracefs: tracefs.clone(),
            capacity,
            next: AtomicUsize::new(0),
            isa,
            counting: OnceLock::new(),
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
        let slot = self.tid_slot(tid);
        // SAFETY: our slot of the TIDS mapping (see tid_slot), written only
        // under `threads`' lock; the index before the tid, so a program that
        // sees the tid reads its index.
        unsafe {
            if std::ptr::addr_of!((*slot).tid).read_volatile() == 0 {
                std::ptr::addr_of_mut!((*slot).index).write_volatile(index as u32);
                std::sync::atomic::fence(Ordering::Release);
                std::ptr::addr_of_mut!((*slot).tid).write_volatile(tid);
            }
        }
        Ok(BpfThread {
            exits: self.clone(),
            index,
            tid,
            on: false,
        })
    }

    /// Whether the exit program is detached while no thread counts,
    /// else why it stays attached (a raw program, or no anchor event).
    pub fn detaches_when_idle(&self) -> Result<(), &str> {
        self.anchor().map(|_| ())
    }

    /// The raw exit program in use, else why the record one counts.
    pub fn raw_exit(&self) -> Result<&RawExit, &str> {
        match &self.exit_program {
            ExitProgram::Raw(raw) => Ok(raw),
            ExitProgram::Record { why_not_raw } => Err(why_not_raw),
            ExitProgram::None(why) => Err(why),
        }
    }

    /// How exits are counted, in words for the report's sources.
    pub fn exit_detail(&self) -> String {
        let (system, event) = &self.exit_at;
        match (&self.exit_program, self.anchor()) {
            (ExitProgram::None(why), _) => {
                format!("{system}:{event}: no program attached ({why})")
            }
            (ExitProgram::Raw(raw), _) => format!(
                "raw {} (reason read from {}: no record built), attached throughout and idle while no vCPU counts",
                raw.event, raw.what
            ),
            (ExitProgram::Record { why_not_raw }, Ok(_)) => format!(
                "{system}:{event} read from its record (not raw: {why_not_raw}); its program detached while no vCPU counts"
            ),
            (ExitProgram::Record { why_not_raw }, Err(no_anchor)) => format!(
                "{system}:{event} read from its record (not raw: {why_not_raw}); attached in uncounted parts too: {no_anchor}"
            ),
        }
    }

    /// Whether the exit program is attached now.
    pub fn attached(&self) -> bool {
        lock(&self.switch).link.is_some()
    }

    /// Waits until the last detach has finished closing its link (it
    /// closes on a thread of its own).
    pub fn settle(&self) {
        let closing = lock(&self.switch).closing.take();
        if let Some(closing) = closing {
            let _ = closing.join();
        }
    }

    /// One more thread counts: attach the exit program if it was detached.
    fn thread_on(&self) -> Result<(), BpfError> {
        // Nothing counts before the counting programs are attached.
        self.attach_counting()?;
        let mut sw = lock(&self.switch);
        if sw.link.is_none() && matches!(self.exit_program, ExitProgram::Record { .. }) {
            let mut ebpf = lock(&self.ebpf);
            // The old link may still be closing: the kernel refuses the
            // program twice on one tracepoint (EEXIST) until its detach has
            // begun, so on a refusal wait for the close and try once more.
            let link = match attach_exit(&mut ebpf, &self.exit_at) {
                Ok(link) => link,
                Err(first) => match sw.closing.take() {
                    Some(closing) => {
                        let _ = closing.join();
                        attach_exit(&mut ebpf, &self.exit_at)?
                    }
                    None => return Err(first),
                },
            };
            sw.link = Some(link);
        }
        sw.counting += 1;
        self.store_active(sw.counting);
        Ok(())
    }

    /// One thread fewer counts: the last one detaches the exit program
    /// (when an anchor keeps that cheap).
    fn thread_off(&self) {
        let mut sw = lock(&self.switch);
        sw.counting = sw.counting.saturating_sub(1);
        self.store_active(sw.counting);
        if sw.counting > 0 || self.anchor().is_err() {
            return;
        }
        let Some(id) = sw.link.take() else {
            return;
        };
        let taken = match tracepoint_program(&mut lock(&self.ebpf), "on_exit").and_then(|p| {
            p.take_link(id)
                .map_err(|e| attach_error("on_exit (detach)", e))
        }) {
            Ok(link) => link,
            Err(e) => {
                // Left attached, it finds ACTIVE 0 and counts nothing.
                log::debug!("bpf: {e}");
                return;
            }
        };
        // The program comes off its tracepoint as the link closes.
        sw.closing = std::thread::Builder::new()
            .name("bpf-detach".into())
            .spawn(move || drop(taken))
            .map_err(|e| log::debug!("bpf: closing links on this thread: {e}"))
            .ok();
    }

    /// The anchor on the exit tracepoint, else why there is none (not
    /// attached yet, a raw program, no perf event).
    fn anchor(&self) -> Result<&TracepointAnchor, &str> {
        match self.anchor.get() {
            Some(Ok(a)) => Ok(a),
            Some(Err(why)) => Err(why),
            None => Err("not attached yet"),
        }
    }

    /// The `TIDS` slot of `tid`.
    pub(super) fn tid_slot(&self, tid: u32) -> *mut TidSlot {
        let i = tid as usize & (TID_SLOTS - 1);
        // SAFETY: i < TID_SLOTS, and the mapping holds TID_SLOTS slots
        // (checked against the map at load).
        unsafe { self.tids.ptr.as_ptr().cast::<TidSlot>().add(i) }
    }

    fn store_active(&self, threads: u32) {
        // SAFETY: the mapping is one Active (checked at load), written only
        // under `switch`'s lock; the programs only read it.
        unsafe {
            std::ptr::addr_of_mut!((*self.active.ptr.as_ptr().cast::<Active>()).threads)
                .write_volatile(threads);
        }
    }

    /// Attaches what counts, once (later calls give the first one's
    /// answer): the exit program (the record one through its anchor), the
    /// entry program and the event counters. Until then only the inhibit
    /// log is attached; registered threads count nothing.
    ///
    /// Only the exit program is switched afterwards: its tracepoint builds
    /// a record for it at every exit, and its perf link re-attaches in
    /// about 0.2 ms with no text patching (the anchor keeps the tracepoint
    /// registered). The raw tracepoint programs stay: they return after
    /// one load while ACTIVE is 0, and re-attaching a raw tracepoint is a
    /// tracepoint registration: static-key text patching, with IPIs to
    /// every CPU, and an RCU grace period (10-24 ms per switch here; in the
    /// lab's nested TCG a re-attach hung its CPU: a soft lockup).
    pub fn attach_counting(&self) -> Result<(), BpfError> {
        let done = self.counting.get_or_init(|| {
            // The anchor first, so that no detach is a last close. A raw
            // tracepoint program needs none: it is never detached.
            self.anchor.get_or_init(|| match &self.at.exit_program {
                ExitProgram::None(why) => Err(format!("no exit program: {why}")),
                ExitProgram::Raw(_) => Err("a raw tracepoint program, never detached".to_string()),
                ExitProgram::Record { .. } => self
                    .tracefs
                    .event_id(&self.at.exit.0, &self.at.exit.1)
                    .map_err(|e| e.to_string())
                    .and_then(|id| TracepointAnchor::open(id).map_err(|e| e.to_string())),
            });
            // One lock at a time: thread_on/off take the switch, then ebpf.
            let link = attach(&mut lock(&self.ebpf), &self.at).map_err(|e| e.to_string())?;
            lock(&self.switch).link = link;
            let (mut counters, unavailable) = if self.at.events {
                attach_events(&mut lock(&self.ebpf), &self.tracefs)
            } else {
                (Vec::new(), Vec::new())
            };
            counters.push(EXITS_COUNTER);
            Ok((counters, unavailable))
        });
        done.as_ref().map(|_| ()).map_err(|why| BpfError::Attach {
            what: "the counting programs".into(),
            why: why.clone(),
        })
    }

    /// The tracepoint counters this object keeps per vCPU thread (names as
    /// `crate::specs` gives them; the `kvm_exit` total among them): a run
    /// needs no perf counter for these. Empty until attached.
    pub fn counters(&self) -> &[&'static str] {
        match self.counting.get() {
            Some(Ok((c, _))) => c,
            _ => &[],
        }
    }

    /// Event counters that could not be attached, with why (their perf
    /// counters are needed instead).
    pub fn unavailable(&self) -> &[(&'static str, String)] {
        match self.counting.get() {
            Some(Ok((_, u))) => u,
            _ => &[],
        }
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
        self.inhibit_changes_except(None)
    }

    /// [`BpfExits::inhibit_changes`] but those of thread `except` (one that
    /// samples its own changes), if given.
    pub fn inhibit_changes_except(
        &self,
        except: Option<u32>,
    ) -> Option<(Vec<InhibitChange>, u64, &BTreeMap<u32, String>)> {
        let (m, names) = self.inhibits.as_ref()?;
        // SAFETY: the mapping is one InhibitLog (checked at load), plain
        // integers; the program only appends, each entry complete before
        // the thread that wrote it went on.
        let log: InhibitLog = unsafe { m.ptr.as_ptr().cast::<InhibitLog>().read_volatile() };
        let n = usize::try_from(log.next).unwrap_or(usize::MAX);
        let mut changes: Vec<InhibitChange> = log.entries[..n.min(INHIBIT_LOG)]
            .iter()
            .filter(|e| Some(e.tid) != except)
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
        let exit = match self.exit_program {
            ExitProgram::Raw(_) => "on_exit_raw",
            _ => "on_exit",
        };
        (count(exit), count("on_entry"))
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn tracepoint_program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut TracePoint, BpfError> {
    ebpf.program_mut(name)
        .and_then(|p| <&mut TracePoint>::try_from(p).ok())
        .ok_or(BpfError::Layout("a tracepoint program"))
}

fn attach_error(what: &str, e: aya::programs::ProgramError) -> BpfError {
    BpfError::Attach {
        what: what.to_string(),
        why: e.to_string(),
    }
}

/// Attaches the (loaded) exit program to its tracepoint: its link.
fn attach_exit(
    ebpf: &mut Ebpf,
    (system, event): &(String, String),
) -> Result<TracePointLinkId, BpfError> {
    tracepoint_program(ebpf, "on_exit")?
        .attach(system, event)
        .map_err(|e| attach_error(&format!("{system}:{event}"), e))
}

fn raw_program<'a>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut RawTracePoint, BpfError> {
    ebpf.program_mut(name)
        .ok_or(BpfError::Layout(name))?
        .try_into()
        .map_err(|_| BpfError::Layout(name))
}

/// Loads (verifies) the exit and entry programs.
fn load_programs(ebpf: &mut Ebpf, at: &Attach) -> Result<(), BpfError> {
    match &at.exit_program {
        ExitProgram::None(_) => {}
        ExitProgram::Raw(_) => raw_program(ebpf, "on_exit_raw")?.load().map_err(load_err)?,
        ExitProgram::Record { .. } => tracepoint_program(ebpf, "on_exit")?
            .load()
            .map_err(load_err)?,
    }
    raw_program(ebpf, "on_entry")?.load().map_err(load_err)
}

/// Attaches the (loaded) exit and entry programs: the exit's link (None:
/// the raw exit program, whose link lives as long as the object).
fn attach(ebpf: &mut Ebpf, at: &Attach) -> Result<Option<TracePointLinkId>, BpfError> {
    let link = match &at.exit_program {
        ExitProgram::None(_) => None,
        ExitProgram::Raw(raw) => {
            raw_program(ebpf, "on_exit_raw")?
                .attach(&raw.event)
                .map_err(|e| attach_error(&format!("raw tracepoint {}", raw.event), e))?;
            None
        }
        ExitProgram::Record { .. } => Some(attach_exit(ebpf, &at.exit)?),
    };
    raw_program(ebpf, "on_entry")?
        .attach(&at.entry)
        .map_err(|e| attach_error(&format!("raw tracepoint {}", at.entry), e))?;
    Ok(link)
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
    /// Whether this thread is counted in `ACTIVE`.
    on: bool,
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
    /// Turns counting of this thread's exits on or off: stores into the
    /// shared maps; the first thread to switch on attaches the exit program
    /// and the last to switch off detaches it (two syscalls, no grace
    /// period). The exit in progress (this thread is in userspace, handling
    /// it) is left untimed. Err: the exit program could not be attached
    /// again (this thread then counts nothing).
    pub fn set_counting(&mut self, on: bool) -> Result<(), BpfError> {
        let e = self.exits.element(self.index);
        // SAFETY: our own element (see Mapping); the BPF program runs for
        // this thread only while it is in KVM_RUN, not now.
        unsafe { std::ptr::addr_of_mut!((*e).pending).write_volatile(0) };
        if on && !self.on {
            self.exits.thread_on()?;
            self.on = true;
        }
        // SAFETY: as above.
        unsafe { std::ptr::addr_of_mut!((*e).counting).write_volatile(u32::from(on)) };
        if !on && self.on {
            self.exits.thread_off();
            self.on = false;
        }
        Ok(())
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
        // Switching off cannot fail.
        let _ = self.set_counting(false);
        let mut threads = self.exits.threads.lock().unwrap_or_else(|p| p.into_inner());
        let slot = self.exits.tid_slot(self.tid);
        // SAFETY: the TIDS slot, under `threads`' lock (see register).
        unsafe {
            if std::ptr::addr_of!((*slot).tid).read_volatile() == self.tid {
                std::ptr::addr_of_mut!((*slot).tid).write_volatile(0);
            }
        }
        let _ = threads.remove(&self.tid);
    }
}
