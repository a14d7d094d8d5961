//! Parsing the records of a perf ring buffer (`include/uapi/linux/perf_event.h`).
//!
//! A pure function over bytes ([`parse_records`]): a malformed record (size
//! smaller than a header, size beyond the data, fields beyond the record)
//! stops parsing with a [`ParseError`]; nothing here panics.

/// `PERF_RECORD_LOST`: the kernel dropped records (buffer full).
pub const PERF_RECORD_LOST: u32 = 2;
/// `PERF_RECORD_THROTTLE`: sampling was throttled (samples missed).
pub const PERF_RECORD_THROTTLE: u32 = 5;
/// `PERF_RECORD_SAMPLE`.
pub const PERF_RECORD_SAMPLE: u32 = 9;
/// `PERF_RECORD_LOST_SAMPLES`: samples the kernel generated but dropped.
pub const PERF_RECORD_LOST_SAMPLES: u32 = 13;

/// `PERF_SAMPLE_IP`.
pub const PERF_SAMPLE_IP: u64 = 1 << 0;
/// `PERF_SAMPLE_TID`.
pub const PERF_SAMPLE_TID: u64 = 1 << 1;
/// `PERF_SAMPLE_TIME`.
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;
/// `PERF_SAMPLE_ADDR`.
pub const PERF_SAMPLE_ADDR: u64 = 1 << 3;
/// `PERF_SAMPLE_ID`.
pub const PERF_SAMPLE_ID: u64 = 1 << 6;
/// `PERF_SAMPLE_CPU`.
pub const PERF_SAMPLE_CPU: u64 = 1 << 7;
/// `PERF_SAMPLE_PERIOD`.
pub const PERF_SAMPLE_PERIOD: u64 = 1 << 8;
/// `PERF_SAMPLE_STREAM_ID`.
pub const PERF_SAMPLE_STREAM_ID: u64 = 1 << 9;
/// `PERF_SAMPLE_RAW`.
pub const PERF_SAMPLE_RAW: u64 = 1 << 10;
/// `PERF_SAMPLE_IDENTIFIER`.
pub const PERF_SAMPLE_IDENTIFIER: u64 = 1 << 16;

/// The `sample_type` bits [`parse_records`] understands; any other bit
/// makes every sample unparseable (reported, not guessed).
pub const SUPPORTED_SAMPLE_TYPE: u64 = PERF_SAMPLE_IDENTIFIER
    | PERF_SAMPLE_IP
    | PERF_SAMPLE_TID
    | PERF_SAMPLE_TIME
    | PERF_SAMPLE_ADDR
    | PERF_SAMPLE_ID
    | PERF_SAMPLE_STREAM_ID
    | PERF_SAMPLE_CPU
    | PERF_SAMPLE_PERIOD
    | PERF_SAMPLE_RAW;

/// `struct perf_event_header` size.
const HEADER: usize = 8;

/// `PERF_SAMPLE_TID`: the task a sample was taken in, as seen from the
/// pid namespace of the process that opened the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleTid {
    /// Process id (thread group id).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
}

/// One record of the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// `PERF_RECORD_SAMPLE`: `id` (from IDENTIFIER or ID, else 0), `time`
    /// (0 without TIME), the task (None without TID) and the raw
    /// tracepoint data (empty without RAW).
    Sample {
        /// Sample id of the event (`PERF_EVENT_IOC_ID`).
        id: u64,
        /// `PERF_SAMPLE_TIME` (ns, of the event's clock).
        time: u64,
        /// `PERF_SAMPLE_TID`: needed to tell threads apart in the ring of
        /// an event that is not bound to one (a CPU-wide event).
        tid: Option<SampleTid>,
        /// The tracepoint's record: common fields first, as in its format.
        raw: &'a [u8],
    },
    /// `PERF_RECORD_LOST`: `lost` records of event `id` were dropped
    /// (also `PERF_RECORD_LOST_SAMPLES`, with `id` 0: not known).
    Lost {
        /// Sample id of the event that could not write (0: unknown).
        id: u64,
        /// Number of records dropped.
        lost: u64,
    },
    /// Any other record type (e.g. [`PERF_RECORD_THROTTLE`]).
    Other {
        /// `perf_event_header.type`.
        kind: u32,
    },
}

/// Why parsing stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed perf record at byte {offset}: {what}")]
pub struct ParseError {
    /// Offset of the bad record in the parsed bytes.
    pub offset: usize,
    /// What was wrong.
    pub what: &'static str,
}

/// Parses the records in `bytes` (whole records, as copied from the ring).
///
/// Yields `Err` once at the first malformed record, then stops.
pub fn parse_records(bytes: &[u8], sample_type: u64) -> Records<'_> {
    Records {
        bytes,
        at: 0,
        sample_type,
        done: false,
    }
}

/// Iterator of [`parse_records`].
#[derive(Debug, Clone)]
pub struct Records<'a> {
    bytes: &'a [u8],
    at: usize,
    sample_type: u64,
    done: bool,
}

impl<'a> Iterator for Records<'a> {
    type Item = std::result::Result<Record<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.at >= self.bytes.len() {
            return None;
        }
        let offset = self.at;
        let bad = |what| Some(Err(ParseError { offset, what }));
        let rest = &self.bytes[offset..];
        let Some(header) = rest.get(..HEADER) else {
            self.done = true;
            return bad("truncated header");
        };
        let kind = le_u32(header, 0).unwrap_or(0);
        let size = usize::from(u16::from_le_bytes([header[6], header[7]]));
        if size < HEADER {
            self.done = true;
            return bad("record size smaller than its header");
        }
        let Some(record) = rest.get(..size) else {
            self.done = true;
            return bad("record size beyond the data");
        };
        self.at += size;
        let body = &record[HEADER..];
        let parsed = match kind {
            PERF_RECORD_SAMPLE => parse_sample(body, self.sample_type),
            PERF_RECORD_LOST => match (le_u64(body, 0), le_u64(body, 8)) {
                (Some(id), Some(lost)) => Ok(Record::Lost { id, lost }),
                _ => Err("lost record too short"),
            },
            PERF_RECORD_LOST_SAMPLES => match le_u64(body, 0) {
                Some(lost) => Ok(Record::Lost { id: 0, lost }),
                None => Err("lost-samples record too short"),
            },
            kind => Ok(Record::Other { kind }),
        };
        match parsed {
            Ok(r) => Some(Ok(r)),
            Err(what) => {
                self.done = true;
                bad(what)
            }
        }
    }
}

/// The body of a `PERF_RECORD_SAMPLE` (after the header).
fn parse_sample(body: &[u8], sample_type: u64) -> std::result::Result<Record<'_>, &'static str> {
    if sample_type & !SUPPORTED_SAMPLE_TYPE != 0 {
        return Err("sample_type has bits this parser does not know");
    }
    let short = "sample shorter than its sample_type";
    let mut at = 0usize;
    let mut next = |bit: u64| -> std::result::Result<Option<u64>, &'static str> {
        if sample_type & bit == 0 {
            return Ok(None);
        }
        let v = le_u64(body, at).ok_or(short)?;
        at += 8;
        Ok(Some(v))
    };
    let identifier = next(PERF_SAMPLE_IDENTIFIER)?;
    next(PERF_SAMPLE_IP)?;
    // u32 pid then u32 tid, little-endian in one u64.
    let tid = next(PERF_SAMPLE_TID)?.map(|v| SampleTid {
        pid: v as u32,
        tid: (v >> 32) as u32,
    });
    let time = next(PERF_SAMPLE_TIME)?.unwrap_or(0);
    next(PERF_SAMPLE_ADDR)?;
    let id = next(PERF_SAMPLE_ID)?;
    next(PERF_SAMPLE_STREAM_ID)?;
    next(PERF_SAMPLE_CPU)?; // u32 cpu + u32 res
    next(PERF_SAMPLE_PERIOD)?;
    let mut raw: &[u8] = &[];
    if sample_type & PERF_SAMPLE_RAW != 0 {
        let len = le_u32(body, at).ok_or(short)? as usize;
        let start = at + 4;
        raw = body
            .get(start..start.saturating_add(len))
            .ok_or("raw data beyond the record")?;
    }
    Ok(Record::Sample {
        id: identifier.or(id).unwrap_or(0),
        time,
        tid,
        raw,
    })
}

/// Little-endian u32 at `at`, if in range.
pub(crate) fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

/// Little-endian u64 at `at`, if in range.
pub(crate) fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}
