//! The 16550 serial console (COM1, [`ipivmm_abi::SERIAL_PORT`], 8 ports).
//!
//! Built on [`vm_superio::Serial`]. The guest polls LSR (THR empty is always
//! set), so no interrupt line is wired: the trigger is [`NoInterrupt`].
//!
//! What the guest transmits goes to a [`SerialSink`] chosen by the host and,
//! whatever the sink, into a ring of the last [`TAIL_CAPACITY`] bytes that the
//! host reads through the [`SerialHandle`] (for error reports and the JSON
//! output).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::{self, Write};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use vm_superio::serial::NoEvents;
use vm_superio::{Serial, Trigger};

use crate::budget::{DataKind, GuestBudget};
use crate::bus::{BusDevice, DeviceEvent};

/// Number of I/O ports the console occupies from its base.
pub const SERIAL_PORT_LEN: u64 = 8;
/// Bytes of recent output always kept for the host ([`SerialHandle::tail`]).
pub const TAIL_CAPACITY: usize = 16 * 1024;
/// Most bytes [`SerialSink::Capture`] keeps; later output is counted and dropped.
pub const CAPTURE_LIMIT: usize = 16 * 1024 * 1024;
/// A guest line longer than this is logged in pieces ([`SerialSink::Log`]).
pub const LOG_LINE_MAX: usize = 1024;
/// Longest line a watching console hands over
/// ([`SerialConsole::watch_lines`]); a longer one is skipped whole.
pub const WATCHED_LINE_MAX: usize = 256;

/// Where guest console output goes (besides the tail ring, which is always kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SerialSink {
    /// Raw bytes to the host's stdout (the user's terminal), through
    /// [`crate::stdout`]: never waits for it; what does not fit in its
    /// queue is dropped and counted ([`SerialHandle::stdout_dropped`]).
    Stdout,
    /// One `log::info!` per line, prefixed `guest: `, control characters escaped.
    Log,
    /// Kept in memory (up to [`CAPTURE_LIMIT`]); read with [`SerialHandle::captured`].
    Capture,
    /// Only the tail ring.
    Discard,
}

/// A `vm_superio` interrupt trigger that does nothing: the guest polls.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoInterrupt;

impl Trigger for NoInterrupt {
    type E = Infallible;

    fn trigger(&self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// Splits a byte stream into log lines: `\n` ends a line, `\r` is dropped,
/// lines longer than [`LOG_LINE_MAX`] are cut, control characters escaped.
#[derive(Debug, Default)]
struct LineBuffer {
    line: Vec<u8>,
}

impl LineBuffer {
    /// Feed one byte; returns a finished line, if any.
    fn push(&mut self, byte: u8) -> Option<String> {
        match byte {
            b'\n' => Some(self.take()),
            b'\r' => None,
            _ => {
                self.line.push(byte);
                (self.line.len() >= LOG_LINE_MAX).then(|| self.take())
            }
        }
    }

    /// The unfinished line, if any (emptied).
    fn take_partial(&mut self) -> Option<String> {
        (!self.line.is_empty()).then(|| self.take())
    }

    fn take(&mut self) -> String {
        let text = ipivmm_term::text::escape_controls(&String::from_utf8_lossy(&self.line));
        self.line.clear();
        text
    }
}

/// The complete lines of a watching console: a line of at most
/// [`WATCHED_LINE_MAX`] bytes (`\r` dropped) becomes [`LineWatch::done`] at
/// its `\n`, control characters escaped; a longer one is skipped whole (no
/// piece of it is a line), so what is handed over is bounded and is never
/// part of a line.
#[derive(Debug, Default)]
struct LineWatch {
    line: Vec<u8>,
    overlong: bool,
    /// The line completed by the last byte, until the device hands it over
    /// (one byte reaches the sink per THR write, so at most one).
    done: Option<String>,
}

impl LineWatch {
    fn push(&mut self, byte: u8) {
        match byte {
            b'\n' => {
                if !std::mem::take(&mut self.overlong) {
                    let text = String::from_utf8_lossy(&self.line);
                    self.done = Some(ipivmm_term::text::escape_controls(&text));
                }
                self.line.clear();
            }
            b'\r' => {}
            _ if self.line.len() < WATCHED_LINE_MAX => self.line.push(byte),
            _ => self.overlong = true,
        }
    }
}

/// State shared between the device and its [`SerialHandle`].
#[derive(Debug)]
struct Shared {
    tail: VecDeque<u8>,
    capture: Vec<u8>,
    capture_limit: usize,
    /// Capture bytes charged to the budget so far (in blocks).
    capture_charged: usize,
    /// The vCPU whose port write is being handled.
    vcpu: usize,
    budget: Arc<GuestBudget>,
    capture_dropped: u64,
    /// Bytes [`SerialSink::Stdout`] dropped: stdout's queue was full.
    stdout_dropped: u64,
    total: u64,
    lines: LineBuffer,
    /// Some when the console watches its lines ([`SerialConsole::watch_lines`]).
    watch: Option<LineWatch>,
}

impl Shared {
    fn new(capture_limit: usize, budget: Arc<GuestBudget>) -> Self {
        Self {
            tail: VecDeque::with_capacity(TAIL_CAPACITY),
            capture: Vec::new(),
            capture_limit,
            capture_charged: 0,
            vcpu: 0,
            budget,
            capture_dropped: 0,
            stdout_dropped: 0,
            total: 0,
            lines: LineBuffer::default(),
            watch: None,
        }
    }
}

impl Shared {
    /// Room for `more` captured bytes: charged to the budget in blocks of
    /// [`CAPTURE_BLOCK`] and reserved fallibly. False when the budget (or
    /// the allocator) refused: the bytes are dropped and the run stops.
    fn make_room(&mut self, more: usize) -> bool {
        let needed = self.capture.len() + more;
        if needed > self.capture_charged {
            let block = (needed - self.capture_charged).max(CAPTURE_BLOCK);
            if self
                .budget
                .charge(self.vcpu, DataKind::Serial, block as u64)
                .is_err()
            {
                return false;
            }
            self.capture_charged += block;
        }
        if self.capture.capacity() < needed {
            let want = self.capture_charged - self.capture.len();
            if self.capture.try_reserve_exact(want).is_err() {
                self.budget
                    .allocation_failed(self.vcpu, DataKind::Serial, want as u64);
                return false;
            }
        }
        true
    }
}

/// Captured bytes are charged to the budget this many at a time.
const CAPTURE_BLOCK: usize = 64 * 1024;

/// Lock that survives poisoning: the shared state is plain bytes and
/// counters, consistent after every statement.
fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The `Write` end handed to `vm_superio::Serial`.
#[derive(Debug)]
struct SinkWriter {
    sink: SerialSink,
    shared: Arc<Mutex<Shared>>,
}

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut s = lock(&self.shared);
        s.total += buf.len() as u64;
        for &b in buf {
            if s.tail.len() == TAIL_CAPACITY {
                s.tail.pop_front();
            }
            s.tail.push_back(b);
        }
        if let Some(w) = &mut s.watch {
            buf.iter().for_each(|&b| w.push(b));
        }
        match self.sink {
            SerialSink::Stdout => {
                // Never blocks the vCPU: a full queue drops (and counts).
                let queued = ipivmm_term::stdout::stdout().offer(buf);
                s.stdout_dropped += (buf.len() - queued) as u64;
            }
            SerialSink::Log => {
                for &b in buf {
                    if let Some(line) = s.lines.push(b) {
                        log::info!("guest: {line}");
                    }
                }
            }
            SerialSink::Capture => {
                let room = s.capture_limit.saturating_sub(s.capture.len());
                let keep = if s.make_room(buf.len().min(room)) {
                    buf.len().min(room)
                } else {
                    0
                };
                s.capture.extend_from_slice(&buf[..keep]);
                s.capture_dropped += (buf.len() - keep) as u64;
            }
            SerialSink::Discard => {}
        }
        Ok(buf.len())
    }

    /// No-op: `vm_superio` flushes after every byte; stdout output leaves
    /// through its queue by itself, a `Log` line at its end, by
    /// [`SerialHandle::flush`] and when the console is dropped.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for SinkWriter {
    fn drop(&mut self) {
        flush_sink(self.sink, &self.shared);
    }
}

fn flush_sink(sink: SerialSink, shared: &Mutex<Shared>) {
    match sink {
        // The queue drains on its own, in order: whoever prints next through
        // it (the report) comes after, and nothing here waits for stdout.
        SerialSink::Stdout => {}
        SerialSink::Log => {
            if let Some(line) = lock(shared).lines.take_partial() {
                log::info!("guest: {line}");
            }
        }
        SerialSink::Capture | SerialSink::Discard => {}
    }
}

/// Host-side view of a [`SerialConsole`]'s output; cheap to clone, usable
/// from any thread during and after the run.
#[derive(Clone, Debug)]
pub struct SerialHandle {
    sink: SerialSink,
    shared: Arc<Mutex<Shared>>,
}

impl SerialHandle {
    /// The last (at most [`TAIL_CAPACITY`]) bytes the guest wrote.
    pub fn tail(&self) -> Vec<u8> {
        lock(&self.shared).tail.iter().copied().collect()
    }

    /// [`tail`](Self::tail) as lossy UTF-8.
    pub fn tail_text(&self) -> String {
        String::from_utf8_lossy(&self.tail()).into_owned()
    }

    /// Everything captured by [`SerialSink::Capture`] (empty for other sinks).
    pub fn captured(&self) -> Vec<u8> {
        lock(&self.shared).capture.clone()
    }

    /// [`captured`](Self::captured) as lossy UTF-8.
    pub fn captured_text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.shared).capture).into_owned()
    }

    /// Bytes [`SerialSink::Capture`] dropped after reaching [`CAPTURE_LIMIT`].
    pub fn capture_dropped(&self) -> u64 {
        lock(&self.shared).capture_dropped
    }

    /// Bytes [`SerialSink::Stdout`] dropped because stdout's queue was
    /// full (stdout did not keep up, or nobody reads it).
    pub fn stdout_dropped(&self) -> u64 {
        lock(&self.shared).stdout_dropped
    }

    /// Total bytes the guest transmitted.
    pub fn total_bytes(&self) -> u64 {
        lock(&self.shared).total
    }

    /// Push out the unfinished `Log` line. Call at the end of a run. (Stdout
    /// output needs nothing: it leaves through [`crate::stdout`]'s queue;
    /// [`ipivmm_term::stdout::StdoutQueue::drain`] waits for it, bounded.)
    pub fn flush(&self) {
        flush_sink(self.sink, &self.shared);
    }
}

/// The 16550 console device. Register it at
/// [`SERIAL_PORT`](ipivmm_abi::SERIAL_PORT) for [`SERIAL_PORT_LEN`] ports.
#[derive(Debug)]
pub struct SerialConsole {
    serial: Serial<NoInterrupt, NoEvents, SinkWriter>,
    lost_bytes: u64,
    shared: Arc<Mutex<Shared>>,
}

impl SerialConsole {
    /// A console writing to `sink`, and the handle the host keeps to read
    /// its output.
    pub fn new(sink: SerialSink) -> (Self, SerialHandle) {
        Self::with_budget(sink, Arc::new(GuestBudget::unlimited()))
    }

    /// [`new`](Self::new), with what [`SerialSink::Capture`] keeps charged
    /// to `budget`.
    pub fn with_budget(sink: SerialSink, budget: Arc<GuestBudget>) -> (Self, SerialHandle) {
        Self::with_capture_limit(sink, CAPTURE_LIMIT, budget)
    }

    fn with_capture_limit(
        sink: SerialSink,
        capture_limit: usize,
        budget: Arc<GuestBudget>,
    ) -> (Self, SerialHandle) {
        let shared = Arc::new(Mutex::new(Shared::new(capture_limit, budget)));
        let writer = SinkWriter {
            sink,
            shared: shared.clone(),
        };
        let console = Self {
            serial: Serial::new(NoInterrupt, writer),
            lost_bytes: 0,
            shared: shared.clone(),
        };
        (console, SerialHandle { sink, shared })
    }

    /// Bytes that could not be written to the sink (e.g. stdout closed).
    pub fn lost_bytes(&self) -> u64 {
        self.lost_bytes
    }

    /// Hand every complete line the guest writes to the vCPU that wrote its
    /// `\n`, as [`DeviceEvent::ConsoleLine`] (a multiboot test kernel's
    /// output marks its tests' ends: docs/kvm-unit-tests.md).
    pub fn watch_lines(&mut self) {
        lock(&self.shared).watch = Some(LineWatch::default());
    }
}

impl BusDevice for SerialConsole {
    fn read(&mut self, _vcpu: usize, offset: u64, data: &mut [u8]) {
        for (reg, b) in (offset..).zip(data.iter_mut()) {
            *b = match u8::try_from(reg) {
                Ok(reg) if u64::from(reg) < SERIAL_PORT_LEN => self.serial.read(reg),
                _ => 0xff,
            };
        }
    }

    fn write(&mut self, vcpu: usize, offset: u64, data: &[u8]) -> Option<DeviceEvent> {
        lock(&self.shared).vcpu = vcpu;
        for (reg, &b) in (offset..).zip(data.iter()) {
            let Ok(reg) = u8::try_from(reg) else { break };
            if u64::from(reg) >= SERIAL_PORT_LEN {
                break;
            }
            if let Err(e) = self.serial.write(reg, b) {
                if self.lost_bytes == 0 {
                    log::warn!("serial console output lost: {e:?}");
                }
                self.lost_bytes += 1;
            }
        }
        let mut s = lock(&self.shared);
        let line = s.watch.as_mut().and_then(|w| w.done.take());
        line.map(DeviceEvent::ConsoleLine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THR: u64 = 0;
    const LSR: u64 = 5;
    const LSR_THR_EMPTY: u8 = 0x20;
    const LSR_IDLE: u8 = 0x40;

    fn put(c: &mut SerialConsole, text: &[u8]) {
        for &b in text {
            assert_eq!(c.write(0, THR, &[b]), None);
        }
    }

    #[test]
    fn thr_bytes_reach_capture_and_tail() {
        let (mut c, h) = SerialConsole::new(SerialSink::Capture);
        put(&mut c, b"hello, host\r\n");
        assert_eq!(h.captured(), b"hello, host\r\n");
        assert_eq!(h.captured_text(), "hello, host\r\n");
        assert_eq!(h.tail(), b"hello, host\r\n");
        assert_eq!(h.total_bytes(), 13);
        assert_eq!(c.lost_bytes(), 0);
    }

    #[test]
    fn lsr_reports_thr_empty() {
        let (mut c, _h) = SerialConsole::new(SerialSink::Discard);
        for _ in 0..3 {
            let mut lsr = [0u8];
            c.read(0, LSR, &mut lsr);
            assert_eq!(
                lsr[0] & (LSR_THR_EMPTY | LSR_IDLE),
                LSR_THR_EMPTY | LSR_IDLE
            );
            put(&mut c, b"x");
        }
    }

    #[test]
    fn non_thr_registers_do_not_output() {
        let (mut c, h) = SerialConsole::new(SerialSink::Capture);
        // IER, LCR, MCR, scratch: configuration, not output.
        c.write(0, 1, &[0]);
        c.write(0, 3, &[0x03]);
        c.write(0, 4, &[0x08]);
        c.write(0, 7, &[0x5a]);
        let mut scr = [0u8];
        c.read(0, 7, &mut scr);
        assert_eq!(scr, [0x5a]);
        assert!(h.captured().is_empty());
        // Out-of-range offsets (only reachable without the bus) are ignored.
        let mut buf = [0u8; 2];
        c.read(0, 8, &mut buf);
        assert_eq!(buf, [0xff, 0xff]);
        assert_eq!(c.write(0, 8, b"zz"), None);
        assert!(h.captured().is_empty());
    }

    #[test]
    fn tail_keeps_last_16k_for_every_sink() {
        for sink in [SerialSink::Discard, SerialSink::Capture, SerialSink::Log] {
            let (mut c, h) = SerialConsole::new(sink);
            let data: Vec<u8> = (0..TAIL_CAPACITY + 1000)
                .map(|i| b'a' + (i % 26) as u8)
                .collect();
            put(&mut c, &data);
            assert_eq!(h.tail(), &data[1000..], "{sink:?}");
            assert_eq!(h.total_bytes(), data.len() as u64);
        }
    }

    #[test]
    fn capture_is_charged_to_the_budget_and_stops_at_it() {
        let budget = Arc::new(GuestBudget::new(3 * CAPTURE_BLOCK as u64));
        let (mut c, h) = SerialConsole::with_budget(SerialSink::Capture, budget.clone());
        let data = vec![b'x'; 4 * CAPTURE_BLOCK];
        for &b in &data {
            c.write(2, THR, &[b]);
        }
        assert_eq!(h.captured().len(), 3 * CAPTURE_BLOCK);
        assert_eq!(h.capture_dropped(), CAPTURE_BLOCK as u64);
        assert_eq!(budget.used(), 3 * CAPTURE_BLOCK as u64);
        let e = budget.excess().expect("the budget names the excess");
        assert_eq!((e.vcpu, e.kind), (2, DataKind::Serial));
        // Other sinks keep nothing and charge nothing.
        let quiet = Arc::new(GuestBudget::new(1));
        let (mut c, _h) = SerialConsole::with_budget(SerialSink::Discard, quiet.clone());
        put(&mut c, &data);
        assert_eq!((quiet.used(), quiet.excess()), (0, None));
    }

    #[test]
    fn capture_is_bounded() {
        let (mut c, h) = SerialConsole::with_capture_limit(
            SerialSink::Capture,
            4,
            Arc::new(GuestBudget::unlimited()),
        );
        put(&mut c, b"abcdefg");
        assert_eq!(h.captured(), b"abcd");
        assert_eq!(h.capture_dropped(), 3);
        assert_eq!(h.tail(), b"abcdefg");
    }

    #[test]
    fn log_lines_are_split_and_escaped() {
        let mut lb = LineBuffer::default();
        let mut out = Vec::new();
        for &b in b"one\r\ntwo\x1b[31m\tx\nthree" {
            out.extend(lb.push(b));
        }
        assert_eq!(
            out,
            vec!["one".to_string(), "two\\u{1b}[31m\tx".to_string()]
        );
        assert_eq!(lb.take_partial().as_deref(), Some("three"));
        assert_eq!(lb.take_partial(), None);
        // An endless line is cut at LOG_LINE_MAX.
        let mut cut = Vec::new();
        for _ in 0..LOG_LINE_MAX * 2 + 5 {
            cut.extend(lb.push(b'z'));
        }
        assert_eq!(cut.len(), 2);
        assert!(cut.iter().all(|l| l.len() == LOG_LINE_MAX));
        assert_eq!(lb.take_partial().map(|l| l.len()), Some(5));
    }

    #[test]
    fn a_watching_console_hands_over_complete_bounded_escaped_lines() {
        let (mut c, h) = SerialConsole::new(SerialSink::Discard);
        // Not watching: no line is handed over.
        put(&mut c, b"quiet 1\n");
        c.watch_lines();
        let mut lines = Vec::new();
        let mut feed = |c: &mut SerialConsole, text: &[u8]| {
            for &b in text {
                if let Some(e) = c.write(1, THR, &[b]) {
                    lines.push(e);
                }
            }
        };
        feed(&mut c, b"ipi 123296\r\n  ipi ipi 7\nbell\x07\n");
        // A line past the bound is skipped whole, not cut into lines.
        let long = vec![b'x'; WATCHED_LINE_MAX + 1];
        feed(&mut c, &long);
        feed(&mut c, b"\nunfinished");
        let line = |s: &str| DeviceEvent::ConsoleLine(s.into());
        assert_eq!(
            lines,
            [line("ipi 123296"), line("  ipi ipi 7"), line("bell\\u{7}")]
        );
        // Configuration registers are no output.
        assert_eq!(c.write(0, 3, b"\n"), None);
        assert!(h.tail_text().starts_with("quiet 1\nipi 123296"));
    }

    #[test]
    fn handle_works_after_console_is_dropped() {
        let (mut c, h) = SerialConsole::new(SerialSink::Log);
        put(&mut c, b"partial");
        drop(c);
        assert_eq!(h.tail_text(), "partial");
        h.flush();
    }
}
