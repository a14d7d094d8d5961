//! The control port: how a payload talks to the host.
//!
//! The payload writes, with a 32-bit `out` to [`ipivmm_abi::CONTROL_PORT`],
//! the guest-physical address of a [`ipivmm_abi::ControlMsg`] (128 bytes). The
//! [`ControlPort`] device reads the message, checks it, follows the pointers
//! it carries (names, text, sample arrays), writes
//! [`ControlMsg::reply`](ipivmm_abi::ControlMsg::reply) back and hands the
//! result to the vCPU run loop as a [`DeviceEvent::Control`].
//!
//! The work is split so each step can be tested and fuzzed alone:
//! [`decode_msg`] (pure: bytes to [`RawControlMsg`]) and [`resolve`] (follows
//! the pointers in guest memory). Nothing a guest writes can make them panic.

use core::mem::offset_of;

use ipivmm_abi::{
    phase_flags, ControlMsg, GuestCounters, MsgKind, ABI_VERSION, CONTROL_MAGIC, CONTROL_MSG_SIZE,
    MAX_NAME_LEN, MAX_SAMPLES_PER_MSG, MAX_TEXT_LEN, REPLY_OK, REPLY_REJECTED, UNIT_TSC_CYCLES,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use crate::budget::{DataKind, GuestBudget};
use crate::bus::{BusDevice, DeviceEvent};
pub use crate::control_msg::{ControlBody, ControlError, ControlRequest, RawControlMsg};
use std::sync::Arc;

/// Width in bytes of the control port (one 32-bit `out`).
pub const CONTROL_PORT_LEN: u64 = 4;

fn le_u16(b: &[u8; CONTROL_MSG_SIZE], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn le_u32(b: &[u8; CONTROL_MSG_SIZE], off: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(v)
}

fn le_u64(b: &[u8; CONTROL_MSG_SIZE], off: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(v)
}

/// Decode the 128 bytes of a [`ControlMsg`] (little-endian, layout by
/// `offset_of!`) and check magic, version and kind, in that order.
///
/// Pure: touches no guest memory. `reply` and the reserved fields are ignored.
pub fn decode_msg(bytes: &[u8; CONTROL_MSG_SIZE]) -> Result<RawControlMsg, ControlError> {
    let magic = le_u32(bytes, offset_of!(ControlMsg, magic));
    if magic != CONTROL_MAGIC {
        return Err(ControlError::BadMagic(magic));
    }
    let version = le_u16(bytes, offset_of!(ControlMsg, version));
    if version != ABI_VERSION {
        return Err(ControlError::BadVersion(version));
    }
    let raw_kind = le_u16(bytes, offset_of!(ControlMsg, kind));
    let kind = MsgKind::from_raw(raw_kind).ok_or(ControlError::UnknownKind(raw_kind))?;
    let arg_off = offset_of!(ControlMsg, arg);
    let mut arg = [0u64; 4];
    for (i, a) in arg.iter_mut().enumerate() {
        *a = le_u64(bytes, arg_off + 8 * i);
    }
    let c = offset_of!(ControlMsg, counters);
    let counters = GuestCounters::from_fn(|d| le_u64(bytes, c + d.offset));
    Ok(RawControlMsg {
        kind,
        vcpu: le_u32(bytes, offset_of!(ControlMsg, vcpu)),
        phase: le_u32(bytes, offset_of!(ControlMsg, phase)),
        arg,
        counters,
    })
}

/// Read `len` bytes at `gpa`, requiring the whole range to be guest RAM.
fn read_guest(
    mem: &GuestMemoryMmap,
    what: &'static str,
    gpa: u64,
    len: u64,
) -> Result<Vec<u8>, ControlError> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let ulen = check_range(mem, what, gpa, len)?;
    let mut buf = vec![0u8; ulen];
    mem.read_slice(&mut buf, GuestAddress(gpa))
        .map_err(|_| ControlError::OutOfRam { what, gpa, len })?;
    Ok(buf)
}

/// `gpa..gpa + len` lies in guest RAM; its length as a `usize`.
fn check_range(
    mem: &GuestMemoryMmap,
    what: &'static str,
    gpa: u64,
    len: u64,
) -> Result<usize, ControlError> {
    let out_of_ram = ControlError::OutOfRam { what, gpa, len };
    if gpa.checked_add(len).is_none() {
        return Err(out_of_ram);
    }
    let ulen = usize::try_from(len).map_err(|_| out_of_ram.clone())?;
    if len > 0 && !GuestMemoryBackend::check_range(mem, GuestAddress(gpa), ulen) {
        return Err(out_of_ram);
    }
    Ok(ulen)
}

/// Read and validate a phase or record name.
fn read_name(mem: &GuestMemoryMmap, gpa: u64, len: u64) -> Result<String, ControlError> {
    if len == 0 {
        return Err(ControlError::EmptyName);
    }
    if len > MAX_NAME_LEN {
        return Err(ControlError::NameTooLong(len));
    }
    let bytes = read_guest(mem, "name", gpa, len)?;
    let name = String::from_utf8(bytes).map_err(|e| ControlError::NameNotUtf8 {
        valid_up_to: e.utf8_error().valid_up_to(),
    })?;
    if let Some((offset, c)) = name.char_indices().find(|(_, c)| c.is_control()) {
        return Err(ControlError::NameControlChar {
            offset,
            code: u32::from(c),
        });
    }
    Ok(name)
}

/// Read a Done/Panic text: lossy UTF-8 with its control characters
/// escaped ([`ipivmm_term::text::escape_controls`]: it reaches terminals);
/// longer than [`MAX_TEXT_LEN`] is truncated to its first `MAX_TEXT_LEN`
/// bytes (only those are read).
fn read_text(mem: &GuestMemoryMmap, gpa: u64, len: u64) -> Result<String, ControlError> {
    let take = len.min(MAX_TEXT_LEN);
    let bytes = read_guest(mem, "message text", gpa, take)?;
    let mut text = ipivmm_term::text::escape_controls(&String::from_utf8_lossy(&bytes));
    if len > MAX_TEXT_LEN {
        text.push_str(&format!(" [truncated from {len} bytes]"));
    }
    Ok(text)
}

/// Check a decoded message against the vCPU that sent it and follow its
/// pointers into `mem` (without a memory budget).
pub fn resolve(
    raw: RawControlMsg,
    vcpu: usize,
    mem: &GuestMemoryMmap,
) -> Result<ControlRequest, ControlError> {
    resolve_within(raw, vcpu, mem, &GuestBudget::unlimited())
}

/// The samples at `gpa`: `count` of them charged to `budget` before they
/// are read, into a fallible allocation, without an intermediate copy.
fn read_samples(
    mem: &GuestMemoryMmap,
    budget: &GuestBudget,
    vcpu: usize,
    gpa: u64,
    count: u64,
) -> Result<Vec<u64>, ControlError> {
    // count <= MAX_SAMPLES_PER_MSG = 2^20, so count * 8 cannot overflow.
    let bytes = count * 8;
    // Check the range before charging: a bad pointer is the guest's fault
    // to report, not an excess.
    check_range(mem, "samples", gpa, bytes)?;
    budget
        .charge(vcpu, DataKind::Samples, bytes)
        .map_err(ControlError::OverBudget)?;
    let mut samples = Vec::new();
    if samples.try_reserve_exact(count as usize).is_err() {
        budget.release(bytes);
        let e = budget.allocation_failed(vcpu, DataKind::Samples, bytes);
        return Err(ControlError::OverBudget(e));
    }
    let mut chunk = [0u8; 4096];
    let mut at = gpa;
    let mut left = bytes as usize;
    while left > 0 {
        let n = left.min(chunk.len());
        let out_of_ram = ControlError::OutOfRam {
            what: "samples",
            gpa,
            len: bytes,
        };
        mem.read_slice(&mut chunk[..n], GuestAddress(at))
            .map_err(|_| out_of_ram)?;
        samples.extend(chunk[..n].chunks_exact(8).map(|c| {
            let mut v = [0u8; 8];
            v.copy_from_slice(c);
            u64::from_le_bytes(v)
        }));
        at += n as u64;
        left -= n;
    }
    Ok(samples)
}

/// [`resolve`], charging the samples a message hands over to `budget`.
pub fn resolve_within(
    raw: RawControlMsg,
    vcpu: usize,
    mem: &GuestMemoryMmap,
    budget: &GuestBudget,
) -> Result<ControlRequest, ControlError> {
    if usize::try_from(raw.vcpu).ok() != Some(vcpu) {
        return Err(ControlError::VcpuMismatch {
            claimed: raw.vcpu,
            actual: vcpu,
        });
    }
    let [a0, a1, a2, _] = raw.arg;
    let phase = raw.phase;
    let body = match raw.kind {
        MsgKind::Hello => ControlBody::Hello { features: a0 },
        MsgKind::PhaseBegin => {
            if a2 & !phase_flags::ALL != 0 {
                return Err(ControlError::UnknownPhaseFlags(a2));
            }
            ControlBody::PhaseBegin {
                phase,
                name: read_name(mem, a0, a1)?,
                uncounted: a2 & phase_flags::UNCOUNTED != 0,
            }
        }
        MsgKind::PhaseEnd => ControlBody::PhaseEnd { phase },
        MsgKind::Samples => {
            if a1 > MAX_SAMPLES_PER_MSG {
                return Err(ControlError::TooManySamples(a1));
            }
            if a2 != UNIT_TSC_CYCLES {
                return Err(ControlError::UnknownUnit(a2));
            }
            let samples = read_samples(mem, budget, vcpu, a0, a1)?;
            ControlBody::Samples {
                phase,
                unit: a2,
                samples,
            }
        }
        MsgKind::Record => ControlBody::Record {
            phase,
            name: read_name(mem, a0, a1)?,
            value: a2,
        },
        MsgKind::Done => ControlBody::Done {
            status: a0,
            message: read_text(mem, a1, a2)?,
        },
        MsgKind::Panic => ControlBody::Panic {
            message: read_text(mem, a0, a1)?,
        },
    };
    Ok(ControlRequest {
        vcpu,
        counters: raw.counters,
        body,
    })
}

/// The control-port device. Register it at
/// [`CONTROL_PORT`](ipivmm_abi::CONTROL_PORT) for [`CONTROL_PORT_LEN`] bytes.
#[derive(Debug)]
pub struct ControlPort {
    mem: GuestMemoryMmap,
    budget: Arc<GuestBudget>,
}

impl ControlPort {
    /// A control port reading messages from `mem` (a clone of the VM's
    /// guest memory; cloning shares the mappings).
    pub fn new(mem: GuestMemoryMmap) -> Self {
        Self::with_budget(mem, Arc::new(GuestBudget::unlimited()))
    }

    /// A control port whose samples are charged to `budget`.
    pub fn with_budget(mem: GuestMemoryMmap, budget: Arc<GuestBudget>) -> Self {
        Self { mem, budget }
    }

    /// Handle the message at `gpa` written by vCPU `vcpu`: read, decode,
    /// resolve, then write [`REPLY_OK`] or [`REPLY_REJECTED`] into its
    /// `reply` field (unless the message itself lies outside guest RAM).
    pub fn handle(&self, vcpu: usize, gpa: u64) -> Result<ControlRequest, ControlError> {
        let bytes = read_guest(&self.mem, "control message", gpa, CONTROL_MSG_SIZE as u64)?;
        let mut msg = [0u8; CONTROL_MSG_SIZE];
        msg.copy_from_slice(&bytes);
        let result =
            decode_msg(&msg).and_then(|raw| resolve_within(raw, vcpu, &self.mem, &self.budget));
        let reply = if result.is_ok() {
            REPLY_OK
        } else {
            REPLY_REJECTED
        };
        // The whole message was just read from RAM, so its reply field is in
        // RAM too; a failure here can only mean the memory map changed.
        let reply_gpa = GuestAddress(gpa + offset_of!(ControlMsg, reply) as u64);
        if let Err(e) = self.mem.write_slice(&reply.to_le_bytes(), reply_gpa) {
            log::warn!("vCPU {vcpu}: cannot write control reply at {reply_gpa:?}: {e}");
        }
        result
    }
}

impl BusDevice for ControlPort {
    /// Reads of the control port return all-ones.
    fn read(&mut self, _vcpu: usize, _offset: u64, data: &mut [u8]) {
        data.fill(0xff);
    }

    fn write(&mut self, vcpu: usize, _offset: u64, data: &[u8]) -> Option<DeviceEvent> {
        let result = match <[u8; 4]>::try_from(data) {
            Ok(v) => self.handle(vcpu, u64::from(u32::from_le_bytes(v))),
            Err(_) => Err(ControlError::BadAccessWidth(data.len())),
        };
        Some(DeviceEvent::Control(result))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use ipivmm_abi::CONTROL_PORT;

    use super::*;
    use crate::bus::{AddressSpace, Bus};

    const RAM: usize = 1 << 20;
    const MSG: u64 = 0x1000;
    const DATA: u64 = 0x2000;

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), RAM)]).unwrap()
    }

    fn counters() -> GuestCounters {
        GuestCounters::from_fn(|d| d.offset as u64 / 8 + 1)
    }

    fn msg(kind: u16, vcpu: u32, phase: u32, arg: [u64; 4]) -> ControlMsg {
        ControlMsg {
            magic: CONTROL_MAGIC,
            version: ABI_VERSION,
            kind,
            vcpu,
            phase,
            arg,
            counters: counters(),
            reply: 0xdead,
            reserved: 0,
        }
    }

    /// Serialize field by field, little-endian (what the guest's repr(C)
    /// struct looks like in memory on x86).
    fn encode(m: &ControlMsg) -> [u8; CONTROL_MSG_SIZE] {
        let mut b = [0u8; CONTROL_MSG_SIZE];
        let mut put = |off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
        put(offset_of!(ControlMsg, magic), &m.magic.to_le_bytes());
        put(offset_of!(ControlMsg, version), &m.version.to_le_bytes());
        put(offset_of!(ControlMsg, kind), &m.kind.to_le_bytes());
        put(offset_of!(ControlMsg, vcpu), &m.vcpu.to_le_bytes());
        put(offset_of!(ControlMsg, phase), &m.phase.to_le_bytes());
        for (i, a) in m.arg.iter().enumerate() {
            put(offset_of!(ControlMsg, arg) + 8 * i, &a.to_le_bytes());
        }
        for d in &GuestCounters::ALL {
            let v = (d.get)(&m.counters);
            put(
                offset_of!(ControlMsg, counters) + d.offset,
                &v.to_le_bytes(),
            );
        }
        put(offset_of!(ControlMsg, reply), &m.reply.to_le_bytes());
        put(offset_of!(ControlMsg, reserved), &m.reserved.to_le_bytes());
        b
    }

    fn reply_at(mem: &GuestMemoryMmap, gpa: u64) -> u64 {
        mem.read_obj::<u64>(GuestAddress(gpa + offset_of!(ControlMsg, reply) as u64))
            .unwrap()
    }

    /// Place `m` at `gpa`, send it as vCPU `vcpu` through a bus, return the
    /// event's result.
    fn send(
        mem: &GuestMemoryMmap,
        gpa: u64,
        vcpu: usize,
        m: &ControlMsg,
    ) -> Result<ControlRequest, ControlError> {
        mem.write_slice(&encode(m), GuestAddress(gpa)).unwrap();
        send_raw(mem, vcpu, &(gpa as u32).to_le_bytes())
    }

    fn send_raw(
        mem: &GuestMemoryMmap,
        vcpu: usize,
        data: &[u8],
    ) -> Result<ControlRequest, ControlError> {
        let mut bus = Bus::new();
        bus.insert(
            AddressSpace::Pio,
            u64::from(CONTROL_PORT),
            CONTROL_PORT_LEN,
            Arc::new(Mutex::new(ControlPort::new(mem.clone()))),
        )
        .unwrap();
        match bus.write(AddressSpace::Pio, vcpu, u64::from(CONTROL_PORT), data) {
            Ok(Some(DeviceEvent::Control(r))) => r,
            other => panic!("unexpected bus result {other:?}"),
        }
    }

    #[test]
    fn decode_reads_every_field() {
        let m = msg(MsgKind::Record as u16, 7, 9, [10, 11, 12, 13]);
        let raw = decode_msg(&encode(&m)).unwrap();
        assert_eq!(
            raw,
            RawControlMsg {
                kind: MsgKind::Record,
                vcpu: 7,
                phase: 9,
                arg: [10, 11, 12, 13],
                counters: counters(),
            }
        );
    }

    #[test]
    fn every_kind_decodes_and_resolves() {
        let mem = mem();
        mem.write_slice(b"pingpong", GuestAddress(DATA)).unwrap();
        let samples: Vec<u64> = vec![1, u64::MAX, 0x0102_0304_0506_0708];
        let sample_gpa = DATA + 0x100;
        for (i, s) in samples.iter().enumerate() {
            mem.write_obj(*s, GuestAddress(sample_gpa + 8 * i as u64))
                .unwrap();
        }
        let text_gpa = DATA + 0x200;
        mem.write_slice(b"all good \xff", GuestAddress(text_gpa))
            .unwrap();

        let cases: Vec<(ControlMsg, ControlBody)> = vec![
            (
                msg(1, 2, 0, [0xf00, 0, 0, 0]),
                ControlBody::Hello { features: 0xf00 },
            ),
            (
                msg(2, 2, 5, [DATA, 8, 0, 0]),
                ControlBody::PhaseBegin {
                    phase: 5,
                    name: "pingpong".into(),
                    uncounted: false,
                },
            ),
            (
                msg(2, 2, 5, [DATA, 8, phase_flags::UNCOUNTED, 0]),
                ControlBody::PhaseBegin {
                    phase: 5,
                    name: "pingpong".into(),
                    uncounted: true,
                },
            ),
            (msg(3, 2, 5, [0; 4]), ControlBody::PhaseEnd { phase: 5 }),
            (
                msg(4, 2, 5, [sample_gpa, 3, UNIT_TSC_CYCLES, 0]),
                ControlBody::Samples {
                    phase: 5,
                    unit: 0,
                    samples: samples.clone(),
                },
            ),
            (
                msg(4, 2, 5, [0xffff_ffff_ffff, 0, UNIT_TSC_CYCLES, 0]),
                ControlBody::Samples {
                    phase: 5,
                    unit: 0,
                    samples: vec![],
                },
            ),
            (
                msg(5, 2, 5, [DATA, 4, 42, 0]),
                ControlBody::Record {
                    phase: 5,
                    name: "ping".into(),
                    value: 42,
                },
            ),
            (
                msg(6, 2, 0, [3, text_gpa, 10, 0]),
                ControlBody::Done {
                    status: 3,
                    message: "all good \u{fffd}".into(),
                },
            ),
            (
                msg(6, 2, 0, [0, 0, 0, 0]),
                ControlBody::Done {
                    status: 0,
                    message: String::new(),
                },
            ),
            (
                msg(7, 2, 0, [text_gpa, 8, 0, 0]),
                ControlBody::Panic {
                    message: "all good".into(),
                },
            ),
        ];
        for (m, body) in cases {
            let req = send(&mem, MSG, 2, &m).unwrap();
            assert_eq!(req.vcpu, 2);
            assert_eq!(req.counters, counters());
            assert_eq!(req.body.kind() as u16, m.kind);
            assert_eq!(req.body, body);
            assert_eq!(reply_at(&mem, MSG), REPLY_OK, "reply written for {body:?}");
        }
    }

    #[test]
    fn header_errors() {
        let mem = mem();
        let mut m = msg(1, 0, 0, [0; 4]);
        m.magic = 0x1234_5678;
        assert_eq!(
            send(&mem, MSG, 0, &m),
            Err(ControlError::BadMagic(0x1234_5678))
        );
        assert_eq!(reply_at(&mem, MSG), REPLY_REJECTED);

        let mut m = msg(1, 0, 0, [0; 4]);
        m.version = 2;
        let err = send(&mem, MSG, 0, &m).unwrap_err();
        assert_eq!(err, ControlError::BadVersion(2));
        assert_eq!(err.to_string(), "ABI version 2 (expected 1)");
        assert_eq!(reply_at(&mem, MSG), REPLY_REJECTED);

        for kind in [0u16, 8, 0xffff] {
            assert_eq!(
                send(&mem, MSG, 0, &msg(kind, 0, 0, [0; 4])),
                Err(ControlError::UnknownKind(kind))
            );
            assert_eq!(reply_at(&mem, MSG), REPLY_REJECTED);
        }

        let err = send(&mem, MSG, 1, &msg(1, 3, 0, [0; 4])).unwrap_err();
        assert_eq!(
            err,
            ControlError::VcpuMismatch {
                claimed: 3,
                actual: 1
            }
        );
        assert_eq!(err.to_string(), "message from vCPU 3 sent by vCPU 1");
        assert_eq!(reply_at(&mem, MSG), REPLY_REJECTED);

        // A good message afterwards is accepted again.
        assert!(send(&mem, MSG, 0, &msg(1, 0, 0, [0; 4])).is_ok());
        assert_eq!(reply_at(&mem, MSG), REPLY_OK);
    }

    #[test]
    fn bad_magic_message_text() {
        assert_eq!(
            ControlError::BadMagic(0xdead_beef).to_string(),
            format!("bad magic 0xdeadbeef (expected {CONTROL_MAGIC:#010x})")
        );
    }

    #[test]
    fn name_errors() {
        let mem = mem();
        let cases: Vec<(&[u8], u64, ControlError)> = vec![
            (
                b"x",
                MAX_NAME_LEN + 1,
                ControlError::NameTooLong(MAX_NAME_LEN + 1),
            ),
            (b"x", u64::MAX, ControlError::NameTooLong(u64::MAX)),
            (b"", 0, ControlError::EmptyName),
            (
                b"ab\xc3\x28",
                4,
                ControlError::NameNotUtf8 { valid_up_to: 2 },
            ),
            (
                b"ab\ncd",
                5,
                ControlError::NameControlChar {
                    offset: 2,
                    code: 0x0a,
                },
            ),
            (
                b"\xc2\x85",
                2,
                ControlError::NameControlChar {
                    offset: 0,
                    code: 0x85,
                },
            ),
        ];
        for kind in [MsgKind::PhaseBegin, MsgKind::Record] {
            for (bytes, len, want) in &cases {
                mem.write_slice(bytes, GuestAddress(DATA)).unwrap();
                let got = send(&mem, MSG, 0, &msg(kind as u16, 0, 1, [DATA, *len, 0, 0]));
                assert_eq!(got.as_ref(), Err(want), "{kind:?} {bytes:?}");
                assert_eq!(reply_at(&mem, MSG), REPLY_REJECTED);
            }
        }
        // Exactly MAX_NAME_LEN bytes of multi-byte UTF-8 is fine.
        let name = "é".repeat(MAX_NAME_LEN as usize / 2);
        mem.write_slice(name.as_bytes(), GuestAddress(DATA))
            .unwrap();
        let req = send(&mem, MSG, 0, &msg(2, 0, 1, [DATA, MAX_NAME_LEN, 0, 0])).unwrap();
        assert_eq!(
            req.body,
            ControlBody::PhaseBegin {
                phase: 1,
                name,
                uncounted: false
            }
        );
    }

    #[test]
    fn unknown_phase_flags_are_rejected() {
        let mem = mem();
        mem.write_slice(b"p", GuestAddress(DATA)).unwrap();
        for flags in [2, 1 << 63, u64::MAX] {
            let got = send(&mem, MSG, 0, &msg(2, 0, 1, [DATA, 1, flags, 0]));
            assert_eq!(got, Err(ControlError::UnknownPhaseFlags(flags)));
            assert_eq!(reply_at(&mem, MSG), REPLY_REJECTED);
        }
    }

    #[test]
    fn pointers_outside_ram_are_rejected() {
        let mem = mem();
        let ram = RAM as u64;
        let cases = [
            (msg(2, 0, 1, [ram - 3, 4, 0, 0]), "name", ram - 3, 4),
            (
                msg(5, 0, 1, [u64::MAX - 1, 4, 0, 0]),
                "name",
                u64::MAX - 1,
                4,
            ),
            (msg(4, 0, 1, [ram - 16, 3, 0, 0]), "samples", ram - 16, 24),
            (
                msg(4, 0, 1, [0x1_0000_0000, 1, 0, 0]),
                "samples",
                0x1_0000_0000,
                8,
            ),
            (msg(6, 0, 1, [0, ram, 1, 0]), "message text", ram, 1),
            (
                msg(7, 0, 1, [ram - 10, 20, 0, 0]),
                "message text",
                ram - 10,
                20,
            ),
        ];
        for (m, what, gpa, len) in cases {
            let err = send(&mem, MSG, 0, &m).unwrap_err();
            assert_eq!(err, ControlError::OutOfRam { what, gpa, len });
            assert_eq!(reply_at(&mem, MSG), REPLY_REJECTED);
        }
        assert_eq!(
            ControlError::OutOfRam {
                what: "name",
                gpa: 0x100000,
                len: 4
            }
            .to_string(),
            "name: GPA 0x100000 + 4 bytes outside guest RAM"
        );
    }

    #[test]
    fn sample_limits() {
        let mem = mem();
        let err = send(
            &mem,
            MSG,
            0,
            &msg(4, 0, 1, [DATA, MAX_SAMPLES_PER_MSG + 1, 0, 0]),
        )
        .unwrap_err();
        assert_eq!(err, ControlError::TooManySamples(MAX_SAMPLES_PER_MSG + 1));
        assert_eq!(
            err.to_string(),
            format!(
                "sample count {} over limit {MAX_SAMPLES_PER_MSG}",
                MAX_SAMPLES_PER_MSG + 1
            )
        );
        let err = send(&mem, MSG, 0, &msg(4, 0, 1, [DATA, u64::MAX, 0, 0])).unwrap_err();
        assert_eq!(err, ControlError::TooManySamples(u64::MAX));
        let err = send(&mem, MSG, 0, &msg(4, 0, 1, [DATA, 1, 7, 0])).unwrap_err();
        assert_eq!(err, ControlError::UnknownUnit(7));
        // The maximum count fits in 1 MiB of RAM only partly: 8 MiB needed.
        let err = send(&mem, MSG, 0, &msg(4, 0, 1, [0, MAX_SAMPLES_PER_MSG, 0, 0])).unwrap_err();
        assert_eq!(
            err,
            ControlError::OutOfRam {
                what: "samples",
                gpa: 0,
                len: MAX_SAMPLES_PER_MSG * 8
            }
        );
    }

    #[test]
    fn long_text_is_truncated() {
        let mem = mem();
        let text = vec![b'a'; 2000];
        mem.write_slice(&text, GuestAddress(DATA)).unwrap();
        // Only the first MAX_TEXT_LEN bytes are read, so even a length running
        // past the end of RAM is accepted.
        for len in [2000, u64::MAX] {
            let req = send(&mem, MSG, 0, &msg(7, 0, 0, [DATA, len, 0, 0])).unwrap();
            let ControlBody::Panic { message } = req.body else {
                panic!("not a panic: {:?}", req.body)
            };
            assert_eq!(
                message,
                format!(
                    "{} [truncated from {len} bytes]",
                    "a".repeat(MAX_TEXT_LEN as usize)
                )
            );
        }
        let req = send(&mem, MSG, 0, &msg(7, 0, 0, [DATA, 1, 0, 0])).unwrap();
        assert!(!req.body.resumes_vcpu());
        let req = send(&mem, MSG, 0, &msg(3, 0, 0, [0; 4])).unwrap();
        assert!(req.body.resumes_vcpu());
    }

    #[test]
    fn message_text_reaches_the_host_with_its_controls_escaped() {
        let mem = mem();
        let text = b"\r\x1b[2K\x1b[1A...\x1b[8m hidden\tend";
        mem.write_slice(text, GuestAddress(DATA)).unwrap();
        for kind in [6u16, 7] {
            let arg = match kind {
                6 => [1, DATA, text.len() as u64, 0],
                _ => [DATA, text.len() as u64, 0, 0],
            };
            let req = send(&mem, MSG, 0, &msg(kind, 0, 0, arg)).unwrap();
            let message = match req.body {
                ControlBody::Done { message, .. } | ControlBody::Panic { message } => message,
                other => panic!("{other:?}"),
            };
            assert_eq!(message, "\\r\\u{1b}[2K\\u{1b}[1A...\\u{1b}[8m hidden\tend");
            assert!(!message.chars().any(|c| c.is_control() && c != '\t'));
        }
    }

    #[test]
    fn message_straddling_end_of_ram_is_rejected() {
        let mem = mem();
        let gpa = RAM as u64 - 64;
        // Write the first 64 bytes of a valid message at the end of RAM.
        let bytes = encode(&msg(1, 0, 0, [0; 4]));
        mem.write_slice(&bytes[..64], GuestAddress(gpa)).unwrap();
        let err = send_raw(&mem, 0, &(gpa as u32).to_le_bytes()).unwrap_err();
        assert_eq!(
            err,
            ControlError::OutOfRam {
                what: "control message",
                gpa,
                len: CONTROL_MSG_SIZE as u64
            }
        );
        // Entirely outside RAM.
        let err = send_raw(&mem, 0, &0xffff_fff0u32.to_le_bytes()).unwrap_err();
        assert_eq!(
            err,
            ControlError::OutOfRam {
                what: "control message",
                gpa: 0xffff_fff0,
                len: CONTROL_MSG_SIZE as u64
            }
        );
        // The last valid position works.
        let gpa = (RAM - CONTROL_MSG_SIZE) as u64;
        assert!(send(&mem, gpa, 0, &msg(1, 0, 0, [0; 4])).is_ok());
        assert_eq!(reply_at(&mem, gpa), REPLY_OK);
    }

    #[test]
    fn narrow_writes_are_rejected() {
        let mem = mem();
        mem.write_slice(&encode(&msg(1, 0, 0, [0; 4])), GuestAddress(MSG))
            .unwrap();
        assert_eq!(
            send_raw(&mem, 0, &[0x00]),
            Err(ControlError::BadAccessWidth(1))
        );
        assert_eq!(
            send_raw(&mem, 0, &[0x00, 0x10]),
            Err(ControlError::BadAccessWidth(2))
        );
        // Nothing was read or replied.
        assert_eq!(reply_at(&mem, MSG), 0xdead);
        let mut port = ControlPort::new(mem.clone());
        assert_eq!(
            port.write(0, 0, &[0; 8]),
            Some(DeviceEvent::Control(Err(ControlError::BadAccessWidth(8))))
        );
        let mut buf = [0u8; 4];
        port.read(0, 0, &mut buf);
        assert_eq!(buf, [0xff; 4]);
    }

    #[test]
    fn decode_never_panics_on_patterns() {
        // Cheap deterministic fuzz: every byte pattern and random-ish fills.
        let mem = mem();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut accepted, mut rejected) = (0, 0);
        for round in 0u32..4000 {
            let mut b = [0u8; CONTROL_MSG_SIZE];
            for x in b.iter_mut() {
                *x = next() as u8;
            }
            if round & 1 == 0 {
                // Make the header valid so resolve() gets exercised, with
                // arguments that point into (or just past) RAM.
                let m = msg(
                    (round / 2 % 7 + 1) as u16,
                    0,
                    next() as u32,
                    [next() % (RAM as u64 * 2), next() % 200, next() % 2, next()],
                );
                b = encode(&m);
            }
            match decode_msg(&b).and_then(|raw| resolve(raw, 0, &mem)) {
                Ok(_) => accepted += 1,
                Err(_) => rejected += 1,
            }
        }
        assert!(accepted > 100, "accepted {accepted}");
        assert!(rejected > 2000, "rejected {rejected}");
    }
}
