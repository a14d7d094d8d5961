//! This process's stdout, written by a thread of its own so that nobody
//! else ever blocks on it: the guest's serial console
//! (`ipivmm_devices::serial::SerialSink::Stdout`) and the report that follows it.
//!
//! A vCPU thread that wrote the console straight to stdout blocked in
//! `write(2)` when stdout was a pipe nobody drained, holding the console and
//! the stdout lock; the watchdog could stop the VM but the run could not end
//! (issue 20, case 3). Now writers hand their bytes to a bounded queue
//! ([`QUEUE_CAPACITY`]) that the writer thread `ipivmm-stdout` drains:
//! - [`StdoutQueue::offer`] never waits: what does not fit is dropped, and
//!   the caller counts it (the console reports it as `serial_dropped`);
//! - [`StdoutQueue::write_all`] and [`StdoutQueue::drain`] wait, but only
//!   while stdout makes progress: after [`STALL`] without a byte written
//!   they give up ([`Stalled`]), so the process can always exit;
//! - the writer thread writes through its own descriptor (a `dup` of fd 1),
//!   never through `std::io::stdout()`'s lock, and nobody joins it: at exit
//!   it dies with the process, blocked or not.
//!
//! Bytes leave in the order they were queued, whoever queued them.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Most bytes waiting for stdout; [`StdoutQueue::offer`] drops beyond.
pub const QUEUE_CAPACITY: usize = 1 << 20;
/// How long [`StdoutQueue::write_all`] and [`StdoutQueue::drain`] wait for
/// stdout to take a byte before giving up.
pub const STALL: Duration = Duration::from_secs(5);
/// Most bytes the writer thread hands to one `write(2)`.
const CHUNK: usize = 64 << 10;

/// Stdout took nothing for [`STALL`] (e.g. a pipe whose reader never reads):
/// what was not queued (or not yet written) is abandoned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stalled {
    /// Bytes of the call that were not queued.
    pub unqueued: usize,
}

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stdout took nothing for {} s (a pipe nobody reads?); {} bytes not written",
            STALL.as_secs(),
            self.unqueued
        )
    }
}

impl std::error::Error for Stalled {}

/// Where the writer thread writes (fd 1, or a test's sink).
type Sink = Box<dyn Write + Send>;

#[derive(Default)]
struct State {
    queue: VecDeque<u8>,
    /// Bytes the writer thread took and is writing.
    in_flight: usize,
    /// Bytes written so far (progress).
    written: u64,
    /// The sink failed (closed pipe): everything is dropped from now on.
    broken: bool,
    /// The sink, until the writer thread takes it.
    sink: Option<Sink>,
    started: bool,
}

/// A bounded queue in front of a writer thread (see the module docs).
pub struct StdoutQueue {
    state: Mutex<State>,
    /// Signalled when bytes are queued (the writer waits on it).
    queued: Condvar,
    /// Signalled when the writer wrote (or failed): waiters for room or
    /// for the drain.
    progress: Condvar,
    capacity: usize,
    stall: Duration,
}

/// The process's stdout queue (its writer thread starts at the first use).
pub fn stdout() -> &'static StdoutQueue {
    static QUEUE: OnceLock<StdoutQueue> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let sink: Option<Sink> = std::io::stdout()
            .lock()
            .flush()
            .ok()
            .and_then(|()| {
                use std::os::fd::AsFd;
                std::io::stdout().as_fd().try_clone_to_owned().ok()
            })
            .map(|fd| Box::new(std::fs::File::from(fd)) as Sink);
        StdoutQueue::new(sink, QUEUE_CAPACITY, STALL)
    })
}

impl StdoutQueue {
    /// A queue of `capacity` bytes in front of `sink` (None: every write
    /// fails), giving up after `stall` without progress.
    pub fn new(sink: Option<Sink>, capacity: usize, stall: Duration) -> StdoutQueue {
        let state = State {
            broken: sink.is_none(),
            sink,
            ..State::default()
        };
        StdoutQueue {
            state: Mutex::new(state),
            queued: Condvar::new(),
            progress: Condvar::new(),
            capacity,
            stall,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues what of `bytes` fits, without waiting; returns how many bytes
    /// were queued (the rest is the caller's to count as dropped).
    pub fn offer(&'static self, bytes: &[u8]) -> usize {
        let mut st = self.lock();
        self.push(&mut st, bytes)
    }

    fn push(&'static self, st: &mut State, bytes: &[u8]) -> usize {
        if st.broken {
            return 0;
        }
        let n = bytes
            .len()
            .min(self.capacity.saturating_sub(st.queue.len()));
        if n == 0 {
            return 0;
        }
        st.queue.extend(&bytes[..n]);
        if !st.started {
            st.started = true;
            self.start_writer(st);
        }
        self.queued.notify_one();
        n
    }

    fn start_writer(&'static self, st: &mut State) {
        let Some(sink) = st.sink.take() else {
            st.broken = true;
            return;
        };
        let spawned = std::thread::Builder::new()
            .name("ipivmm-stdout".into())
            .spawn(move || self.writer(sink));
        if spawned.is_err() {
            st.broken = true;
            st.queue.clear();
        }
    }

    /// The writer thread: takes chunks off the queue and writes them.
    fn writer(&self, mut sink: Sink) {
        let mut chunk = Vec::with_capacity(CHUNK);
        loop {
            {
                let mut st = self.lock();
                while st.queue.is_empty() {
                    st = self.queued.wait(st).unwrap_or_else(PoisonError::into_inner);
                }
                let n = st.queue.len().min(CHUNK);
                chunk.clear();
                chunk.extend(st.queue.drain(..n));
                st.in_flight = n;
            }
            let ok = sink.write_all(&chunk).and_then(|()| sink.flush()).is_ok();
            let mut st = self.lock();
            st.in_flight = 0;
            st.written += chunk.len() as u64;
            if !ok {
                // Nobody will ever read it: drop what waits, and what comes.
                st.broken = true;
                st.queue.clear();
            }
            self.progress.notify_all();
            if !ok {
                return;
            }
        }
    }

    /// Waits for progress (or `done`), giving up after the stall time
    /// without a byte written. Returns the guard and whether `done` held.
    fn wait_progress<'a>(
        &self,
        mut st: MutexGuard<'a, State>,
        done: impl Fn(&State) -> bool,
    ) -> (MutexGuard<'a, State>, bool) {
        let mut seen = st.written;
        let mut since = Instant::now();
        loop {
            if done(&st) || st.broken {
                return (st, true);
            }
            if st.written != seen {
                seen = st.written;
                since = Instant::now();
            }
            let left = self.stall.saturating_sub(since.elapsed());
            if left.is_zero() {
                return (st, false);
            }
            st = self
                .progress
                .wait_timeout(st, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Queues all of `bytes`, waiting for room while stdout makes progress.
    /// A broken stdout (closed pipe) takes everything silently, as a write
    /// to it would fail.
    pub fn write_all(&'static self, bytes: &[u8]) -> Result<(), Stalled> {
        let mut rest = bytes;
        let mut st = self.lock();
        loop {
            let n = self.push(&mut st, rest);
            rest = &rest[n..];
            if rest.is_empty() || st.broken {
                return Ok(());
            }
            let cap = self.capacity;
            let (g, ok) = self.wait_progress(st, |s| s.queue.len() < cap);
            st = g;
            if !ok {
                return Err(Stalled {
                    unqueued: rest.len(),
                });
            }
        }
    }

    /// Waits until everything queued was written, while stdout makes
    /// progress.
    pub fn drain(&self) -> Result<(), Stalled> {
        let st = self.lock();
        let (st, ok) = self.wait_progress(st, |s| s.queue.is_empty() && s.in_flight == 0);
        if ok {
            Ok(())
        } else {
            Err(Stalled {
                unqueued: st.queue.len() + st.in_flight,
            })
        }
    }

    /// Bytes written to the sink so far.
    pub fn written(&self) -> u64 {
        self.lock().written
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A sink that takes bytes only while `open`, into `out`.
    #[derive(Clone, Default)]
    struct Gate {
        open: Arc<(Mutex<bool>, Condvar)>,
        out: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let (m, c) = &*self.open;
            let mut open = m.lock().unwrap();
            while !*open {
                open = c.wait(open).unwrap();
            }
            self.out.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Gate {
        fn set(&self, open: bool) {
            *self.open.0.lock().unwrap() = open;
            self.open.1.notify_all();
        }
    }

    fn leak(q: StdoutQueue) -> &'static StdoutQueue {
        Box::leak(Box::new(q))
    }

    #[test]
    fn bytes_go_out_in_order_and_drain_waits_for_them() {
        let gate = Gate::default();
        gate.set(true);
        let q = leak(StdoutQueue::new(
            Some(Box::new(gate.clone())),
            64,
            Duration::from_secs(5),
        ));
        assert_eq!(q.offer(b"guest "), 6);
        q.write_all(&[b'r'; 200]).unwrap();
        q.drain().unwrap();
        let out = gate.out.lock().unwrap().clone();
        assert_eq!(&out[..6], b"guest ");
        assert_eq!(out.len(), 206);
        assert_eq!(q.written(), 206);
    }

    #[test]
    fn a_stuck_sink_never_blocks_offer_and_bounds_the_waits() {
        let gate = Gate::default(); // closed: the writer blocks in write
        let q = leak(StdoutQueue::new(
            Some(Box::new(gate.clone())),
            16,
            Duration::from_millis(200),
        ));
        let t = Instant::now();
        let mut taken = 0;
        for _ in 0..10_000 {
            taken += q.offer(b"0123456789");
        }
        // At most the queue and one chunk in the blocked writer.
        assert!(taken <= 16 + CHUNK, "{taken}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let t = Instant::now();
        let e = q.write_all(&[0; 100]).unwrap_err();
        assert!(e.unqueued > 0 && e.unqueued <= 100, "{e:?}");
        taken += 100 - e.unqueued;
        assert!(q.drain().is_err());
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(400) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
        // The reader comes back: everything queued goes out.
        gate.set(true);
        q.drain().unwrap();
        assert_eq!(gate.out.lock().unwrap().len(), taken);
    }

    #[test]
    fn a_failed_sink_drops_everything_quietly() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let q = leak(StdoutQueue::new(
            Some(Box::new(Closed)),
            64,
            Duration::from_secs(5),
        ));
        q.write_all(b"lost").unwrap();
        q.drain().unwrap();
        assert_eq!(q.offer(b"more"), 0);
        let none = leak(StdoutQueue::new(None, 64, Duration::from_secs(5)));
        assert_eq!(none.offer(b"x"), 0);
        none.write_all(b"x").unwrap();
    }
}
