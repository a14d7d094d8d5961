//! Kicking a vCPU thread out of KVM_RUN: a real-time signal whose handler
//! sets `kvm_run.immediate_exit`, so a kick that lands just before KVM_RUN
//! is not lost (the run returns EINTR at once instead of entering the guest).
use std::cell::Cell;
use std::sync::Once;
use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

/// Offset of SIGRTMIN used for kicks.
const KICK_SIGNAL_OFFSET: i32 = 0;

thread_local! {
    /// This thread's `kvm_run.immediate_exit`, while its vCPU runs.
    static IMMEDIATE_EXIT: Cell<*mut u8> = const { Cell::new(std::ptr::null_mut()) };
}

/// The kick signal number.
pub(crate) fn kick_signal() -> i32 {
    SIGRTMIN() + KICK_SIGNAL_OFFSET
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Only touches a thread-local Cell (async-signal-safe: no allocation, no lock).
    let p = IMMEDIATE_EXIT.with(|c| c.get());
    if !p.is_null() {
        // SAFETY: `p` was registered by `ImmediateExitGuard::new` on this very
        // thread and points into the vCPU's kvm_run mapping, which outlives
        // the guard; the guard clears it before the mapping can go away.
        unsafe { std::ptr::write_volatile(p, 1) };
    }
}

/// Install the kick handler once per process.
pub(crate) fn install_kick_handler() -> Result<(), vmm_sys_util::errno::Error> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| result = register_signal_handler(kick_signal(), on_kick));
    result
}

/// Registers a vCPU's `immediate_exit` byte for this thread's kick handler.
pub struct ImmediateExitGuard;

impl ImmediateExitGuard {
    /// `ptr` must point at `kvm_run.immediate_exit` of a vCPU that lives
    /// longer than the returned guard, on the calling thread.
    pub fn new(ptr: *mut u8) -> Self {
        IMMEDIATE_EXIT.with(|c| c.set(ptr));
        Self
    }
}

impl Drop for ImmediateExitGuard {
    fn drop(&mut self) {
        IMMEDIATE_EXIT.with(|c| c.set(std::ptr::null_mut()));
    }
}
