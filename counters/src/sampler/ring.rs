//! The perf mmap ring buffer and the parsing of its records.
//!
//! Layout (`include/uapi/linux/perf_event.h`): one metadata page
//! (`struct perf_event_mmap_page`) followed by 2^n data pages. The kernel
//! writes records at `data_head`; we read from `data_tail` up to `data_head`
//! (read with acquire ordering, so the record bytes before it are visible),
//! copy them out, then publish the new `data_tail` with release ordering so
//! the kernel may overwrite that space. Records can straddle the end of the
//! data area; copying into one contiguous buffer makes them whole again.
//!
//! Parsing ([`parse_records`], in `records.rs`, re-exported here) is a pure
//! function over bytes: a malformed record stops parsing with a
//! [`ParseError`]; nothing panics.

use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::{Result, SamplerError};

pub use super::records::*;

/// `struct perf_event_mmap_page` field offsets (stable since Linux 4.1).
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;
const DATA_OFFSET: usize = 1040;
const DATA_SIZE: usize = 1048;

/// The ring overran or its pointers make no sense; the pending data was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("ring pointers inconsistent (tail {tail}, head {head}, size {size}); pending data skipped")]
pub struct RingError {
    /// `data_tail` before the read.
    pub tail: u64,
    /// `data_head` read.
    pub head: u64,
    /// Data area size.
    pub size: usize,
}

/// The byte ranges of a `size`-byte data area holding the stream bytes
/// `[tail, head)`: the part up to the end of the area, then the wrapped part
/// (possibly empty). `size` must be a power of two.
pub fn pending_ranges(
    tail: u64,
    head: u64,
    size: usize,
) -> std::result::Result<[Range<usize>; 2], RingError> {
    let err = RingError { tail, head, size };
    let len = head.checked_sub(tail).ok_or(err)?;
    if !size.is_power_of_two() || len > size as u64 {
        return Err(err);
    }
    let len = len as usize; // <= size
    let start = (tail & (size as u64 - 1)) as usize;
    let first = len.min(size - start);
    Ok([start..start + first, 0..len - first])
}

/// Appends the stream bytes `[tail, head)` of `data` (a whole data area) to `out`.
pub fn copy_pending(
    data: &[u8],
    tail: u64,
    head: u64,
    out: &mut Vec<u8>,
) -> std::result::Result<usize, RingError> {
    let ranges = pending_ranges(tail, head, data.len())?;
    for r in &ranges {
        out.extend_from_slice(&data[r.clone()]);
    }
    Ok(ranges.iter().map(|r| r.len()).sum())
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// An mmap'ed perf ring buffer, owned by this process.
#[derive(Debug)]
pub struct RingBuffer {
    base: NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned by this value and only read or written
// through `&mut self`, so moving it to another thread is sound.
unsafe impl Send for RingBuffer {}

impl RingBuffer {
    /// Maps 1 metadata page + `data_pages` data pages of perf event `fd`.
    pub fn map(fd: impl AsFd, data_pages: usize) -> Result<Self> {
        if !data_pages.is_power_of_two() || data_pages > 1 << 20 {
            return Err(SamplerError::BadPages(data_pages));
        }
        let page = page_size();
        let map_len = (data_pages + 1)
            .checked_mul(page)
            .ok_or(SamplerError::BadPages(data_pages))?;
        // SAFETY: a fresh shared mapping of a perf event fd at offset 0, at an
        // address chosen by the kernel; the result is checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let source = std::io::Error::last_os_error();
            return Err(SamplerError::Mmap {
                bytes: map_len,
                source,
            });
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or(SamplerError::BadPages(data_pages))?;
        let mut ring = Self {
            base,
            map_len,
            data_offset: page,
            data_size: data_pages * page,
        };
        // Kernels >= 4.1 say where the data is; trust it only if it fits.
        let (off, size) = (ring.meta(DATA_OFFSET), ring.meta(DATA_SIZE));
        if let (Ok(off), Ok(size)) = (usize::try_from(off), usize::try_from(size)) {
            let fits = off.checked_add(size).is_some_and(|end| end <= map_len);
            if off >= page && size.is_power_of_two() && fits {
                (ring.data_offset, ring.data_size) = (off, size);
            }
        }
        Ok(ring)
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    fn meta_atomic(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is one of the u64 fields of the metadata page,
        // which is mapped for the lifetime of `self` and 8-byte aligned (the
        // mapping is page aligned, the offsets are multiples of 8). The
        // kernel accesses these fields atomically (READ_ONCE/smp_store_release).
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(offset).cast::<u64>()) }
    }

    fn meta(&self, offset: usize) -> u64 {
        self.meta_atomic(offset).load(Ordering::Acquire)
    }

    /// Bytes written by the kernel and not yet consumed.
    pub fn pending(&self) -> u64 {
        let head = self.meta(DATA_HEAD);
        head.wrapping_sub(self.meta_atomic(DATA_TAIL).load(Ordering::Relaxed))
    }

    /// Appends every pending byte to `out` and gives the space back to the
    /// kernel. On inconsistent pointers the pending data is skipped
    /// (`data_tail = data_head`) and the error says so.
    pub fn read_pending(&mut self, out: &mut Vec<u8>) -> std::result::Result<usize, RingError> {
        let head = self.meta(DATA_HEAD);
        let tail = self.meta_atomic(DATA_TAIL).load(Ordering::Relaxed);
        let ranges = match pending_ranges(tail, head, self.data_size) {
            Ok(r) => r,
            Err(e) => {
                self.meta_atomic(DATA_TAIL).store(head, Ordering::Release);
                return Err(e);
            }
        };
        let mut n = 0;
        for r in ranges {
            out.reserve(r.len());
            // SAFETY: `r` lies within the data area (pending_ranges bounds it
            // by data_size, and data_offset + data_size <= map_len). The
            // acquire load of data_head makes the kernel's writes to these
            // bytes visible, and the kernel does not touch them until we
            // publish the new data_tail below. `out` has room for r.len()
            // more bytes (reserved above) and does not overlap the mapping.
            unsafe {
                let src = self.base.as_ptr().add(self.data_offset + r.start);
                let dst = out.as_mut_ptr().add(out.len());
                std::ptr::copy_nonoverlapping(src, dst, r.len());
                out.set_len(out.len() + r.len());
            }
            n += r.len();
        }
        self.meta_atomic(DATA_TAIL).store(head, Ordering::Release);
        Ok(n)
    }
}

impl Drop for RingBuffer {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `map`; no
        // reference into it outlives `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}
