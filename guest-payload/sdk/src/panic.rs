//! Failure reporting: the `#[panic_handler]` and CPU exceptions format their
//! message into this vCPU's text buffer, print it on the console and send it
//! as a Panic control message. The vCPU then stays halted.

use crate::{control, cpu, percpu, println};
use core::fmt::{self, Write};
use core::sync::atomic::Ordering;

/// Writes into a byte buffer, dropping what does not fit.
struct Truncating<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Write for Truncating<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len() - self.len;
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Reports `args` as this vCPU's failure and halts.
pub fn report(args: fmt::Arguments) -> ! {
    cpu::disable_interrupts();
    if !percpu::is_initialized() {
        // Only the runtime's own checks run before per-vCPU init, and they
        // report directly; reaching this is an SDK bug.
        control::panic_as(u32::MAX, b"panic before per-vCPU initialisation");
    }
    let pc = percpu::current();
    if pc.in_panic.swap(true, Ordering::Relaxed) {
        control::panic_as(pc.vcpu, b"panic while reporting a panic");
    }
    // SAFETY: `in_panic` makes this the only user of this vCPU's text buffer,
    // and interrupts are off.
    let buf = unsafe { &mut *pc.text.get() };
    let mut w = Truncating { buf, len: 0 };
    let _ = w.write_fmt(args);
    let len = w.len;
    let text = &buf[..len];
    println!(
        "vcpu{}: {}",
        pc.vcpu,
        core::str::from_utf8(text).unwrap_or("<invalid utf-8>")
    );
    control::panic_as(pc.vcpu, text)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    report(format_args!("{info}"))
}
