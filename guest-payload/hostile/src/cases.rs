//! The cases of the hostile test payload (`ipivmm-hostile`), chosen by
//! `BootInfo::params[0]`, and the values a test checks them against.
//!
//! Shared, as one file, by the payload (`mod cases`) and by the test suite
//! (`ipivmm_tests::cases`, included with `#[path]`): `core` only.

/// One misbehaviour of the hostile payload (`BootInfo::params[0]`). The
/// numbers in the docs are those of issue 20.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// (1) vCPU 0 ends phase 0 [`MAX_SAMPLES_PHASE`], then sends
    /// `params[1]` Samples messages (8 if 0) of `MAX_SAMPLES_PER_MSG`
    /// samples of value `u64::MAX` for it, then Done(0). Other vCPUs: Done(0).
    MaxSamples = 1,
    /// (3) vCPU 0 prints [`PRINT_LINE`] on the serial console forever;
    /// the others halt.
    PrintForever = 2,
    /// (6) 2 vCPUs: vCPU 1 says it is ready, then runs [`HALTS`] `cli; hlt`
    /// and sends Done(0); vCPU 0 waits for it, sends it an NMI and Done(0).
    NmiThenHalts = 3,
    /// (6) As [`Case::NmiThenHalts`] with an INIT (level assert, then
    /// de-assert) instead of the NMI, sent inside vCPU 0's phase 0
    /// [`EVENT_PHASE`].
    InitThenHalts = 4,
    /// (6) As [`Case::InitThenHalts`], then a start-up IPI of vector
    /// [`SIPI_VECTOR`]: vCPU 0 first copies a real-mode trampoline to
    /// `SIPI_VECTOR << 12` that sends Done(0, [`SIPI_DONE_TEXT`]) for vCPU 1
    /// from real mode (a 32-bit `out` of a message vCPU 0 prepared at
    /// [`SIPI_MSG_GPA`]) and halts.
    InitSipiThenHalts = 5,
    /// (7) vCPU 0 panics with [`ESCAPE_TEXT`]; the others halt.
    PanicEscapes = 6,
    /// (7) vCPU 0 sends Done(1) with [`ESCAPE_TEXT`]; the others Done(0).
    DoneEscapes = 7,
    /// (9) 2 vCPUs: vCPU 0 runs phase 0 as [`REUSE_NAMES`]`[0]` then as
    /// `[1]`, vCPU 1 runs phase 0 as `[2]`; phase 1 [`REUSE_SAME`] twice on
    /// vCPU 0 (a legitimate reuse). Each phase gets [`REUSE_SAMPLES`]
    /// samples of its own value ([`reuse_value`]) and records `which` = its
    /// index in that list.
    PhaseIdReuse = 8,
    /// (10) vCPU 0 sends [`ORPHAN_SAMPLES`] samples for phase
    /// [`ORPHAN_NEVER_BEGAN`], which never begins, then begins phase
    /// [`ORPHAN_NEVER_ENDED`], sends as many for it and sends Done(0)
    /// without ending it; phase 0 `kept` gets its samples normally.
    OrphanSamples = 9,
    /// (11) Every vCPU runs phase 0 `measure` with 10 samples whose guest
    /// counters grow by [`HUGE_COUNTER`] (each of icr_writes, ipis_sent,
    /// ipis_received, eois): two vCPUs together overflow a u64.
    HugeCounters = 10,
    /// Not hostile: the SDK's ICR builders end to end. vCPU 0 sends
    /// [`SDK_ROUNDS`] rounds of the [`SdkSend`] of `params[1]` (an
    /// `ipi::Ipi` per ICR, built once) on `BootInfo::ipi_vector` and, after
    /// each round, waits until the vCPUs have taken as many IPIs (NMIs) as
    /// the ICRs' `Ipi::targets` add up to. Every vCPU sets up its logical
    /// ID first (the mode's model; xAPIC cluster when `params[2]` is 1) and,
    /// for NMIs, an NMI hook, and runs phase 0 [`SDK_PHASE`] with
    /// `phase_begin_synced` / `phase_end_synced`; after it every vCPU
    /// records `nmis_received` (its NMIs of the phase) and vCPU 0 `icrs`
    /// and `targets` (ICRs per round and the vCPUs they reach).
    SdkSend = 11,
    /// Not hostile: the SDK's NMI stack. 2 vCPUs, phase 0 [`SDK_PHASE`]
    /// as in [`Case::SdkSend`]: [`NMI_NEST_ROUNDS`] times, vCPU 0 sends a
    /// fixed IPI to vCPU 1, whose IPI hook waits (interrupts off, on the
    /// interrupt stack) until an NMI arrives; vCPU 0 sends that NMI once the
    /// hook runs, then waits for the hook to return. The NMI runs on its own
    /// stack (IST2): on the interrupt stack's top it would overwrite the
    /// IPI handler's frame. Records as [`Case::SdkSend`].
    NmiInIpiHandler = 12,
    /// vCPU 0 sends an INIT (level assert) to its own APIC ID, then
    /// Done(0), which it does not reach where the INIT restarts the BSP at
    /// the reset vector (ipivmm's LAPIC model). The others halt.
    InitSelf = 13,
}

impl Case {
    /// Every case, in order.
    pub const ALL: [Case; 13] = [
        Case::MaxSamples,
        Case::PrintForever,
        Case::NmiThenHalts,
        Case::InitThenHalts,
        Case::InitSipiThenHalts,
        Case::PanicEscapes,
        Case::DoneEscapes,
        Case::PhaseIdReuse,
        Case::OrphanSamples,
        Case::HugeCounters,
        Case::SdkSend,
        Case::NmiInIpiHandler,
        Case::InitSelf,
    ];

    /// The case of `BootInfo::params[0]`.
    pub fn from_raw(raw: u64) -> Option<Case> {
        by_number(&Self::ALL, raw, |c| c as u64)
    }
}

/// [`Case::MaxSamples`]: the phase the samples are for.
pub const MAX_SAMPLES_PHASE: &str = "max";
/// [`Case::MaxSamples`]: Samples messages when `params[1]` is 0.
pub const MAX_SAMPLES_MESSAGES: u64 = 8;

/// [`Case::PrintForever`]: what vCPU 0 prints, again and again.
pub const PRINT_LINE: &str = "hostile: printing forever\n";

/// [`Case::InitThenHalts`], [`Case::InitSipiThenHalts`]: vCPU 0's phase 0
/// around its ICR writes (sent with the SDK's builders, counted).
pub const EVENT_PHASE: &str = "send";
/// [`Case::NmiThenHalts`] and the INIT cases: `cli; hlt` of vCPU 1.
pub const HALTS: u64 = 100_000;
/// [`Case::InitSipiThenHalts`]: the start-up vector (trampoline at
/// `SIPI_VECTOR << 12`, free RAM below the payload).
pub const SIPI_VECTOR: u8 = 0x60;
/// [`Case::InitSipiThenHalts`]: where vCPU 0 prepares vCPU 1's Done message.
pub const SIPI_MSG_GPA: u64 = 0x6_1000;
/// [`Case::InitSipiThenHalts`]: the text of the Done sent from real mode
/// (stored after the message, at `SIPI_MSG_GPA + 128`).
pub const SIPI_DONE_TEXT: &str = "started by SIPI in real mode";

/// [`Case::PanicEscapes`] / [`Case::DoneEscapes`]: carriage return, erase
/// line, cursor up, conceal.
pub const ESCAPE_TEXT: &str = "\r\x1b[2K\x1b[1A...\x1b[8m hidden";

/// [`Case::PhaseIdReuse`]: names of phase 0 (vCPU 0 twice, then vCPU 1).
pub const REUSE_NAMES: [&str; 3] = ["alpha", "beta", "gamma"];
/// [`Case::PhaseIdReuse`]: the name phase 1 has both times.
pub const REUSE_SAME: &str = "same";
/// [`Case::PhaseIdReuse`]: samples per phase.
pub const REUSE_SAMPLES: u64 = 16;
/// [`Case::PhaseIdReuse`]: the value of every sample of the `i`-th phase
/// (0..3: [`REUSE_NAMES`], 3 and 4: [`REUSE_SAME`]).
pub const fn reuse_value(i: u64) -> u64 {
    1000 * (i + 1)
}

/// [`Case::OrphanSamples`]: samples sent for each orphan phase.
pub const ORPHAN_SAMPLES: u64 = 100;
/// [`Case::OrphanSamples`]: a phase id that never begins.
pub const ORPHAN_NEVER_BEGAN: u32 = 7;
/// [`Case::OrphanSamples`]: a phase that begins and never ends.
pub const ORPHAN_NEVER_ENDED: u32 = 8;

/// [`Case::HugeCounters`]: what each counter grows by over the phase.
pub const HUGE_COUNTER: u64 = 1 << 63;

/// [`Case::SdkSend`]: rounds of vCPU 0.
pub const SDK_ROUNDS: u64 = 40;
/// [`Case::NmiInIpiHandler`]: rounds of vCPU 0.
pub const NMI_NEST_ROUNDS: u64 = 10;
/// [`Case::SdkSend`], [`Case::NmiInIpiHandler`]: the phase.
pub const SDK_PHASE: &str = "measure";

/// [`Case::SdkSend`]: what vCPU 0 sends each round (`params[1]`); "the
/// others" are vCPUs 1.. of the VM.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdkSend {
    /// Fixed, one physical ICR per other vCPU.
    FixedPhysical = 0,
    /// Fixed, one logical ICR per logical group of the others.
    FixedLogical = 1,
    /// Fixed, shorthand self.
    FixedSelf = 2,
    /// Fixed, shorthand all including self.
    FixedAll = 3,
    /// Fixed, shorthand all excluding self.
    FixedAllButSelf = 4,
    /// Lowest priority, physical, to vCPU 1.
    LowestPriorityPhysical = 5,
    /// Lowest priority, one logical ICR per logical group of the others.
    LowestPriorityLogical = 6,
    /// Lowest priority, shorthand all excluding self.
    LowestPriorityAllButSelf = 7,
    /// NMI, one physical ICR per other vCPU.
    NmiPhysical = 8,
    /// NMI, one logical ICR per logical group of the others.
    NmiLogical = 9,
    /// NMI, shorthand all excluding self.
    NmiAllButSelf = 10,
}

impl SdkSend {
    /// Every kind, in order.
    pub const ALL: [SdkSend; 11] = [
        SdkSend::FixedPhysical,
        SdkSend::FixedLogical,
        SdkSend::FixedSelf,
        SdkSend::FixedAll,
        SdkSend::FixedAllButSelf,
        SdkSend::LowestPriorityPhysical,
        SdkSend::LowestPriorityLogical,
        SdkSend::LowestPriorityAllButSelf,
        SdkSend::NmiPhysical,
        SdkSend::NmiLogical,
        SdkSend::NmiAllButSelf,
    ];

    /// The kind of `params[1]`.
    pub fn from_raw(raw: u64) -> Option<SdkSend> {
        by_number(&Self::ALL, raw, |k| k as u64)
    }

    /// Sends NMIs (else the measured vector).
    pub fn is_nmi(self) -> bool {
        matches!(
            self,
            SdkSend::NmiPhysical | SdkSend::NmiLogical | SdkSend::NmiAllButSelf
        )
    }

    /// Lowest-priority delivery.
    pub fn is_lowest_priority(self) -> bool {
        matches!(
            self,
            SdkSend::LowestPriorityPhysical
                | SdkSend::LowestPriorityLogical
                | SdkSend::LowestPriorityAllButSelf
        )
    }

    /// Logical destinations.
    pub fn is_logical(self) -> bool {
        matches!(
            self,
            SdkSend::FixedLogical | SdkSend::LowestPriorityLogical | SdkSend::NmiLogical
        )
    }
}

/// The value of `all` whose number (`BootInfo::params`) is `raw`.
fn by_number<T: Copy>(all: &[T], raw: u64, number: fn(T) -> u64) -> Option<T> {
    all.iter().copied().find(|&x| number(x) == raw)
}
