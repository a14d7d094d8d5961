//! Decoding a tracepoint's raw sample data with the event's `format`.
//!
//! `PERF_SAMPLE_RAW` carries the tracepoint's record exactly as ftrace
//! describes it in `events/<sys>/<event>/format`: the `common_*` fields
//! first, then the event's fields, at the offsets the format gives (offsets
//! count from the first byte of the raw data). x86 is little-endian.
//! A [`FieldReader`] is built once per event and field; reading never panics:
//! a field beyond the data reads as `None`.

use crate::tracefs::EventFormat;

use super::error::{Result, SamplerError};

/// Where one field of an event lives in the raw data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldReader {
    offset: usize,
    size: usize,
    signed: bool,
}

impl FieldReader {
    /// The first of `candidates` that is a field of `format` with a size of
    /// 1, 2, 4 or 8 bytes (alternative names for other kernels, as
    /// [`crate::tracepoint::FieldEq`] does).
    pub fn new(format: &EventFormat, candidates: &[&str]) -> Option<Self> {
        candidates.iter().find_map(|name| {
            let f = format.field(name)?;
            let size = usize::try_from(f.size).ok()?;
            matches!(size, 1 | 2 | 4 | 8).then_some(Self {
                offset: usize::try_from(f.offset).ok()?,
                size,
                signed: f.signed,
            })
        })
    }

    /// Like [`FieldReader::new`], with an error naming the missing field.
    pub fn require(format: &EventFormat, event: &str, candidates: &[&str]) -> Result<Self> {
        Self::new(format, candidates).ok_or_else(|| SamplerError::MissingField {
            event: event.to_string(),
            field: candidates.join("|"),
        })
    }

    /// Byte offset in the raw data.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Byte size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The field, zero-extended to 64 bits (the raw bytes, whatever the sign).
    pub fn read_u64(&self, raw: &[u8]) -> Option<u64> {
        let b = raw.get(self.offset..self.offset.checked_add(self.size)?)?;
        let mut buf = [0u8; 8];
        buf[..self.size].copy_from_slice(b);
        Some(u64::from_le_bytes(buf))
    }

    /// The field as a signed value (sign-extended when the format says
    /// `signed:1`, else zero-extended).
    pub fn read_i64(&self, raw: &[u8]) -> Option<i64> {
        let v = self.read_u64(raw)?;
        if !self.signed || self.size == 8 {
            return Some(v as i64);
        }
        let shift = 64 - 8 * self.size as u32;
        Some(((v << shift) as i64) >> shift)
    }

    /// The low 32 bits of the field (u64 fields are truncated; callers that
    /// care read [`FieldReader::read_u64`]).
    pub fn read_u32(&self, raw: &[u8]) -> Option<u32> {
        self.read_u64(raw).map(|v| v as u32)
    }

    /// Whether the field is non-zero (for `bool` fields).
    pub fn read_bool(&self, raw: &[u8]) -> Option<bool> {
        self.read_u64(raw).map(|v| v != 0)
    }
}

/// Checks that raw data belongs to a given event: its `common_type` (the
/// first field of every record) equals the event's tracefs id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeCheck {
    common_type: Option<FieldReader>,
    id: u64,
}

impl TypeCheck {
    /// The check for `format` (no check if the format lacks `common_type`).
    pub fn new(format: &EventFormat) -> Self {
        Self {
            common_type: FieldReader::new(format, &["common_type"]),
            id: format.id,
        }
    }

    /// `false` if the raw data is too short or of another event.
    pub fn matches(&self, raw: &[u8]) -> bool {
        match self.common_type {
            Some(f) => f.read_u64(raw) == Some(self.id),
            None => !raw.is_empty(),
        }
    }
}
