//! Sampling tracepoint events on the calling thread, sharing one ring.
//!
//! Each event is `PERF_TYPE_TRACEPOINT` (`config` = tracefs id) with
//! `sample_period = 1` (every hit is a sample) and
//! `sample_type = IDENTIFIER | TIME | RAW`, bound to the calling thread
//! (`pid = 0, cpu = -1`, nothing excluded: tracepoints are kernel events).
//! Time is `CLOCK_MONOTONIC` (`use_clockid`), so samples compare with
//! `clock_gettime(CLOCK_MONOTONIC)` taken in userspace.
//!
//! Nobody waits on the buffer (it is drained synchronously), so wake-ups
//! are pushed to the largest watermark: the kernel queues one wake-up
//! `irq_work` per buffer-size of data written, instead of one per half
//! buffer.
//!
//! Events are opened disabled; [`SampledEvents::open`] maps the ring on the
//! first, redirects the others into it (`PERF_EVENT_IOC_SET_OUTPUT`, which
//! needs the target mapped first), learns each sample id
//! (`PERF_EVENT_IOC_ID`), and leaves enabling to the caller.

use std::fs::File;

use crate::tracepoint::{
    ioctls, perf_event_open_self, perf_event_open_thread, perf_ioctl, tracepoint_attr,
    PerfEventAttr,
};

use super::error::{Result, SamplerError};
use super::ring::{
    RingBuffer, RingError, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_RAW, PERF_SAMPLE_TIME,
};

/// The `sample_type` of every sampling event.
pub const SAMPLE_TYPE: u64 = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW;

/// One sampling tracepoint event of the calling thread.
#[derive(Debug)]
pub struct SamplingEvent {
    file: File,
    name: String,
    tracepoint: u64,
    id: u64,
}

/// The attributes of a sampling tracepoint event (opened disabled).
pub fn sampling_attr(tracepoint: u64) -> PerfEventAttr {
    let mut attr = tracepoint_attr(tracepoint);
    attr.__bindgen_anon_1.sample_period = 1;
    attr.sample_type = SAMPLE_TYPE;
    // Wake-ups by bytes, not events; the kernel clamps the watermark to
    // the data size, so the reader is never woken: it drains at markers.
    attr.set_watermark(1);
    attr.__bindgen_anon_2.wakeup_watermark = u32::MAX;
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    attr
}

impl SamplingEvent {
    /// Opens tracepoint `tracepoint` (tracefs id; `name` = `system:event`,
    /// for messages) on the calling thread, disabled.
    pub fn open(tracepoint: u64, name: &str) -> Result<Self> {
        Self::open_on(tracepoint, name, None)
    }

    /// Opens tracepoint `tracepoint` on thread `tid` of this process (the
    /// calling thread when None), disabled.
    pub fn open_on(tracepoint: u64, name: &str, tid: Option<libc::pid_t>) -> Result<Self> {
        let attr = sampling_attr(tracepoint);
        let opened = match tid {
            None => perf_event_open_self(attr),
            Some(tid) => perf_event_open_thread(attr, tid),
        };
        let file = opened.map_err(|source| SamplerError::Open {
            event: name.to_string(),
            id: tracepoint,
            source,
        })?;
        let mut ev = Self {
            file,
            name: name.to_string(),
            tracepoint,
            id: 0,
        };
        ev.id = ev.query_id()?;
        Ok(ev)
    }

    fn query_id(&self) -> Result<u64> {
        let mut id = 0u64;
        // PERF_EVENT_IOC_ID writes one u64 through the pointer, which is
        // valid and exclusively borrowed for the call.
        perf_ioctl(&self.file, ioctls::ID, &mut id as *mut u64)
            .map_err(|e| ioctl_error("PERF_EVENT_IOC_ID", e))?;
        Ok(id)
    }

    /// Starts sampling (`PERF_EVENT_IOC_ENABLE`).
    pub fn enable(&self) -> Result<()> {
        perf_ioctl(&self.file, ioctls::ENABLE, 0)
            .map_err(|e| ioctl_error("PERF_EVENT_IOC_ENABLE", e))
    }

    /// Stops sampling (`PERF_EVENT_IOC_DISABLE`); the tracepoint costs
    /// (almost) nothing while disabled.
    pub fn disable(&self) -> Result<()> {
        perf_ioctl(&self.file, ioctls::DISABLE, 0)
            .map_err(|e| ioctl_error("PERF_EVENT_IOC_DISABLE", e))
    }

    /// Sends this event's samples to `target`'s ring (`target` mapped first).
    pub fn set_output(&self, target: &SamplingEvent) -> Result<()> {
        use std::os::fd::AsRawFd;
        perf_ioctl(&self.file, ioctls::SET_OUTPUT, target.file.as_raw_fd())
            .map_err(|e| ioctl_error("PERF_EVENT_IOC_SET_OUTPUT", e))
    }

    /// Maps a ring of `data_pages` pages (a power of two) on this event.
    pub fn map_ring(&self, data_pages: usize) -> Result<RingBuffer> {
        RingBuffer::map(&self.file, data_pages)
    }

    /// Sample id (`PERF_EVENT_IOC_ID`): the `id` of this event's records.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The tracefs id of the tracepoint.
    pub fn tracepoint(&self) -> u64 {
        self.tracepoint
    }

    /// `system:event`.
    pub fn name(&self) -> &str {
        &self.name
    }
}

fn ioctl_error(what: &'static str, source: std::io::Error) -> SamplerError {
    SamplerError::Ioctl { what, source }
}

/// Free space (bytes) below which the ring counts as full at a read: more
/// than any `kvm_exit`/`kvm_entry`/`kvm_apicv_inhibit_changed` sample (at
/// most 104 bytes on 6.18) plus the 24-byte `PERF_RECORD_LOST` that would
/// precede it.
pub const FULL_SLACK: usize = 512;

/// What one read of the ring returned.
#[derive(Debug)]
pub struct ReadOut<'a> {
    /// Whole records, oldest first.
    pub bytes: &'a [u8],
    /// The ring pointers were inconsistent; pending data was skipped.
    pub error: Option<RingError>,
    /// Less than [`FULL_SLACK`] bytes were free: the kernel may have dropped
    /// records since the last read. It reports them (`PERF_RECORD_LOST`)
    /// only with the next record it writes, i.e. in a later read.
    pub full: bool,
}

/// Several sampling events of the calling thread writing into one ring.
#[derive(Debug)]
pub struct SampledEvents {
    // Drop order: the ring is unmapped before the events are closed.
    ring: RingBuffer,
    events: Vec<SamplingEvent>,
    buf: Vec<u8>,
}

impl SampledEvents {
    /// Opens `(tracefs id, "system:event")` on the calling thread, all
    /// disabled, into one ring of `data_pages` pages (the first event's).
    pub fn open(tracepoints: &[(u64, &str)], data_pages: usize) -> Result<Self> {
        Self::open_on(tracepoints, data_pages, None)
    }

    /// [`SampledEvents::open`] on thread `tid` of this process (the calling
    /// thread when None).
    pub fn open_on(
        tracepoints: &[(u64, &str)],
        data_pages: usize,
        tid: Option<libc::pid_t>,
    ) -> Result<Self> {
        let events = tracepoints
            .iter()
            .map(|&(id, name)| SamplingEvent::open_on(id, name, tid))
            .collect::<Result<Vec<_>>>()?;
        let Some(first) = events.first() else {
            return Err(SamplerError::NoEvents);
        };
        let ring = first.map_ring(data_pages)?;
        for ev in &events[1..] {
            ev.set_output(first)?;
        }
        Ok(Self {
            ring,
            events,
            buf: Vec::new(),
        })
    }

    /// The events, in the order given to [`SampledEvents::open`].
    pub fn events(&self) -> &[SamplingEvent] {
        &self.events
    }

    /// Enables every event.
    pub fn enable(&self) -> Result<()> {
        self.events.iter().try_for_each(SamplingEvent::enable)
    }

    /// Disables every event.
    pub fn disable(&self) -> Result<()> {
        self.events.iter().try_for_each(SamplingEvent::disable)
    }

    /// Size of the ring's data area in bytes.
    pub fn buffer_bytes(&self) -> usize {
        self.ring.data_size()
    }

    /// Copies every pending record out of the ring (freeing it).
    pub fn read(&mut self) -> ReadOut<'_> {
        self.buf.clear();
        let error = self.ring.read_pending(&mut self.buf).err();
        let free = self.ring.data_size().saturating_sub(self.buf.len());
        ReadOut {
            bytes: &self.buf,
            full: error.is_some() || free < FULL_SLACK,
            error,
        }
    }
}
