//! What a control-port message is once decoded ([`RawControlMsg`]) and
//! resolved ([`ControlRequest`], [`ControlBody`]), and why one is rejected
//! ([`ControlError`]): the types the bus hands to the run loop
//! (`DeviceEvent::Control`) and the control port (`control`) produces.
use crate::budget::Excess;
use ipivmm_abi::{
    phase_flags, GuestCounters, MsgKind, ABI_VERSION, CONTROL_MAGIC, MAX_NAME_LEN,
    MAX_SAMPLES_PER_MSG, UNIT_TSC_CYCLES,
};

/// Why a control-port access or message was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The port was written with a width other than 4 bytes.
    #[error("control port access width {0} bytes (expected a 32-bit out)")]
    BadAccessWidth(usize),
    /// `ControlMsg::magic` is wrong.
    #[error("bad magic {0:#010x} (expected {CONTROL_MAGIC:#010x})")]
    BadMagic(u32),
    /// `ControlMsg::version` is not [`ABI_VERSION`].
    #[error("ABI version {0} (expected {ABI_VERSION})")]
    BadVersion(u16),
    /// `ControlMsg::kind` is not a [`MsgKind`].
    #[error("unknown message kind {0}")]
    UnknownKind(u16),
    /// `ControlMsg::vcpu` names a different vCPU than the one that wrote the port.
    #[error("message from vCPU {claimed} sent by vCPU {actual}")]
    VcpuMismatch {
        /// The `vcpu` field of the message.
        claimed: u32,
        /// The vCPU that wrote the port.
        actual: usize,
    },
    /// A guest range the message points at is not entirely in guest RAM.
    #[error("{what}: GPA {gpa:#x} + {len} bytes outside guest RAM")]
    OutOfRam {
        /// What the range holds ("control message", "name", ...).
        what: &'static str,
        /// Start of the range.
        gpa: u64,
        /// Length of the range in bytes.
        len: u64,
    },
    /// `PhaseBegin` flags with bits no [`phase_flags`] constant defines.
    #[error("unknown phase flags {0:#x} (defined: {all:#x})", all = phase_flags::ALL)]
    UnknownPhaseFlags(u64),
    /// A phase or record name is longer than [`MAX_NAME_LEN`].
    #[error("name too long: {0} bytes (at most {MAX_NAME_LEN})")]
    NameTooLong(u64),
    /// A phase or record name has length 0.
    #[error("empty name")]
    EmptyName,
    /// A phase or record name is not valid UTF-8.
    #[error("non-UTF-8 name (invalid byte at offset {valid_up_to})")]
    NameNotUtf8 {
        /// Length of the valid UTF-8 prefix.
        valid_up_to: usize,
    },
    /// A phase or record name contains a control character.
    #[error("name contains control character U+{code:04X} at byte offset {offset}")]
    NameControlChar {
        /// Byte offset of the character.
        offset: usize,
        /// The character's code point.
        code: u32,
    },
    /// A `Samples` message carries more than [`MAX_SAMPLES_PER_MSG`] samples.
    #[error("sample count {0} over limit {MAX_SAMPLES_PER_MSG}")]
    TooManySamples(u64),
    /// A `Samples` message names a unit other than [`UNIT_TSC_CYCLES`].
    #[error("unknown sample unit {0} (expected {UNIT_TSC_CYCLES} = TSC cycles)")]
    UnknownUnit(u64),
    /// The samples do not fit in the run's guest memory budget (or their
    /// allocation failed).
    #[error("{0}")]
    OverBudget(Excess),
}

/// A [`ControlMsg`] decoded from its 128 bytes, with magic, version and kind
/// checked; pointers not yet followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawControlMsg {
    /// The message kind.
    pub kind: MsgKind,
    /// Sender vCPU as claimed by the message.
    pub vcpu: u32,
    /// Phase id.
    pub phase: u32,
    /// Kind-specific arguments.
    pub arg: [u64; 4],
    /// The sender's counters.
    pub counters: GuestCounters,
}

/// What a control message asks for, with its pointers resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlBody {
    /// The payload is running on this vCPU.
    Hello {
        /// Guest feature bits (informational).
        features: u64,
    },
    /// Phase `phase` begins on this vCPU: snapshot its counters.
    PhaseBegin {
        /// Phase id.
        phase: u32,
        /// Phase name (valid UTF-8, no control characters, 1..=64 bytes).
        name: String,
        /// The uncounted part of a measured phase
        /// ([`ipivmm_abi::phase_flags::UNCOUNTED`]): per-exit counters off.
        uncounted: bool,
    },
    /// Phase `phase` ends on this vCPU: snapshot again, close the window.
    PhaseEnd {
        /// Phase id.
        phase: u32,
    },
    /// Latency samples of phase `phase`.
    Samples {
        /// Phase id.
        phase: u32,
        /// Unit; always [`UNIT_TSC_CYCLES`] in ABI version 1.
        unit: u64,
        /// The samples, in the order the guest stored them.
        samples: Vec<u64>,
    },
    /// A named value of phase `phase`.
    Record {
        /// Phase id.
        phase: u32,
        /// Record name (same rules as phase names).
        name: String,
        /// The value.
        value: u64,
    },
    /// This vCPU is finished; do not resume it.
    Done {
        /// 0 = success.
        status: u64,
        /// Optional message (lossy UTF-8, possibly truncated; empty if none).
        message: String,
    },
    /// The payload failed on this vCPU; do not resume it, fail the run.
    Panic {
        /// The panic message (lossy UTF-8, possibly truncated).
        message: String,
    },
}

impl ControlBody {
    /// The [`MsgKind`] this body came from.
    pub fn kind(&self) -> MsgKind {
        match self {
            ControlBody::Hello { .. } => MsgKind::Hello,
            ControlBody::PhaseBegin { .. } => MsgKind::PhaseBegin,
            ControlBody::PhaseEnd { .. } => MsgKind::PhaseEnd,
            ControlBody::Samples { .. } => MsgKind::Samples,
            ControlBody::Record { .. } => MsgKind::Record,
            ControlBody::Done { .. } => MsgKind::Done,
            ControlBody::Panic { .. } => MsgKind::Panic,
        }
    }

    /// Whether the sending vCPU continues after this message (false for
    /// `Done` and `Panic`).
    pub fn resumes_vcpu(&self) -> bool {
        !matches!(self, ControlBody::Done { .. } | ControlBody::Panic { .. })
    }
}

/// A validated control message from one vCPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRequest {
    /// The vCPU that sent it (checked against the exiting vCPU).
    pub vcpu: usize,
    /// The sender's counters at the time of the message (absolute values).
    pub counters: GuestCounters,
    /// What it asks for.
    pub body: ControlBody,
}
