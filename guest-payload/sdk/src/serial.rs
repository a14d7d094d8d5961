//! Console output on COM1 (16550): poll LSR.THRE, then write the byte. Lines
//! of different vCPUs are kept apart by a spin lock.

use crate::cpu;
use crate::sync::SpinLock;
use core::fmt::{self, Write};
use ipivmm_abi::SERIAL_PORT;

const LSR: u16 = SERIAL_PORT + 5;
const LSR_THRE: u8 = 1 << 5;
/// Polls before writing anyway: a device model that never reports THRE
/// must not hang the guest.
const MAX_POLLS: u32 = 1000;

static LOCK: SpinLock = SpinLock::new();

/// The serial console.
pub struct Serial;

impl Serial {
    fn put(b: u8) {
        for _ in 0..MAX_POLLS {
            if cpu::inb(LSR) & LSR_THRE != 0 {
                break;
            }
        }
        cpu::outb(SERIAL_PORT, b);
    }
}

impl Write for Serial {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        s.bytes().for_each(Self::put);
        Ok(())
    }
}

#[doc(hidden)]
pub fn _print(args: fmt::Arguments) {
    // Bounded: the panic path prints too and must not deadlock on a holder
    // it interrupted.
    let locked = LOCK.try_lock_for(1_000_000);
    let _ = Serial.write_fmt(args);
    if locked {
        LOCK.unlock();
    }
}

/// `print!` to the serial console.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::serial::_print(format_args!($($arg)*)) };
}

/// `println!` to the serial console.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => { $crate::serial::_print(format_args!("{}\n", format_args!($($arg)*))) };
}
