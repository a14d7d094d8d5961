//! Property tests of the control-port decoder: `decode_msg` on arbitrary
//! 128-byte messages, `resolve` on well-formed headers whose pointers and
//! lengths are arbitrary (biased to the edges of guest RAM and of the ABI
//! limits), and `ControlPort::handle` / the bus write path on arbitrary
//! guest addresses and access widths. Nothing a guest writes may panic, and
//! every accepted message must satisfy the ABI's limits.
//!
//! Cases per property: 256, or `IPIVMM_PROPTEST_CASES` for long campaigns.
use core::mem::offset_of;
use ipivmm_abi::{
    ControlMsg, ABI_VERSION, CONTROL_MAGIC, CONTROL_MSG_SIZE, MAX_NAME_LEN, MAX_SAMPLES_PER_MSG,
    MAX_TEXT_LEN, REPLY_OK, REPLY_REJECTED,
};
use ipivmm_devices::bus::{BusDevice, DeviceEvent};
use ipivmm_devices::control::{decode_msg, resolve, ControlBody, ControlError, ControlPort};
use proptest::prelude::*;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Guest RAM of the tests: two regions with a hole between them, so that
/// ranges can straddle a hole as well as the end of RAM.
const LOW: (u64, usize) = (0, 0x10000);
const HIGH: (u64, usize) = (0x20000, 0x10000);
const RAM_END: u64 = 0x30000;

fn cases() -> u32 {
    std::env::var("IPIVMM_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn mem() -> GuestMemoryMmap {
    GuestMemoryMmap::<()>::from_ranges(&[
        (GuestAddress(LOW.0), LOW.1),
        (GuestAddress(HIGH.0), HIGH.1),
    ])
    .expect("test guest memory")
}

fn in_ram(gpa: u64, len: u64) -> bool {
    let inside = |start: u64, size: usize| {
        gpa >= start
            && gpa
                .checked_add(len)
                .is_some_and(|e| e <= start + size as u64)
    };
    len == 0 || inside(LOW.0, LOW.1) || inside(HIGH.0, HIGH.1)
}

/// Guest addresses near the interesting edges: region starts and ends, the
/// hole, the end of RAM, the top of the address space.
fn gpa() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..RAM_END,
        (0u64..256).prop_map(|d| LOW.1 as u64 - d),
        (0u64..256).prop_map(|d| HIGH.0 + d),
        (0u64..256).prop_map(|d| RAM_END - d),
        (0u64..256).prop_map(|d| u64::MAX - d),
        any::<u64>(),
    ]
}

/// Lengths near the ABI limits and the overflow edges.
fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..=(MAX_NAME_LEN + 2),
        (MAX_TEXT_LEN - 2)..=(MAX_TEXT_LEN + 2),
        (MAX_SAMPLES_PER_MSG - 2)..=(MAX_SAMPLES_PER_MSG + 2),
        0u64..0x2000,
        (0u64..16).prop_map(|d| u64::MAX - d),
        (0u64..16).prop_map(|d| (u64::MAX / 8) + d),
        any::<u64>(),
    ]
}

fn header(kind: u16, vcpu: u32, phase: u32, arg: [u64; 4]) -> [u8; CONTROL_MSG_SIZE] {
    let mut b = [0u8; CONTROL_MSG_SIZE];
    b[offset_of!(ControlMsg, magic)..][..4].copy_from_slice(&CONTROL_MAGIC.to_le_bytes());
    b[offset_of!(ControlMsg, version)..][..2].copy_from_slice(&ABI_VERSION.to_le_bytes());
    b[offset_of!(ControlMsg, kind)..][..2].copy_from_slice(&kind.to_le_bytes());
    b[offset_of!(ControlMsg, vcpu)..][..4].copy_from_slice(&vcpu.to_le_bytes());
    b[offset_of!(ControlMsg, phase)..][..4].copy_from_slice(&phase.to_le_bytes());
    for (i, a) in arg.iter().enumerate() {
        b[offset_of!(ControlMsg, arg) + 8 * i..][..8].copy_from_slice(&a.to_le_bytes());
    }
    b
}

/// Checks the ABI's promises on an accepted body.
fn check_body(body: &ControlBody, arg: [u64; 4]) -> Result<(), TestCaseError> {
    match body {
        ControlBody::PhaseBegin { name, .. } | ControlBody::Record { name, .. } => {
            prop_assert!(!name.is_empty() && name.len() as u64 <= MAX_NAME_LEN);
            prop_assert_eq!(name.len() as u64, arg[1]);
            prop_assert!(!name.chars().any(char::is_control));
            prop_assert!(in_ram(arg[0], arg[1]));
        }
        ControlBody::Samples { samples, unit, .. } => {
            prop_assert_eq!(*unit, 0);
            prop_assert_eq!(samples.len() as u64, arg[1]);
            prop_assert!(arg[1] <= MAX_SAMPLES_PER_MSG);
            prop_assert!(in_ram(arg[0], arg[1] * 8));
        }
        ControlBody::Done { message, .. } => {
            prop_assert!(arg[2] == 0 || in_ram(arg[1], arg[2].min(MAX_TEXT_LEN)));
            // Lossy UTF-8 may grow each byte to 3, an escaped control byte
            // to 6 (`\u{1b}`); the truncation note is short.
            prop_assert!(message.len() as u64 <= 6 * MAX_TEXT_LEN + 64);
            prop_assert!(!message.chars().any(|c| c.is_control() && c != '\t'));
        }
        ControlBody::Panic { message } => {
            prop_assert!(arg[1] == 0 || in_ram(arg[0], arg[1].min(MAX_TEXT_LEN)));
            prop_assert!(message.len() as u64 <= 6 * MAX_TEXT_LEN + 64);
            prop_assert!(!message.chars().any(|c| c.is_control() && c != '\t'));
        }
        ControlBody::Hello { .. } | ControlBody::PhaseEnd { .. } => {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// Any 128 bytes: a decode error naming the first bad field, or a
    /// message whose fields are the bytes at their ABI offsets.
    #[test]
    fn decode_msg_never_panics(bytes in proptest::collection::vec(any::<u8>(), CONTROL_MSG_SIZE)) {
        let mut b = [0u8; CONTROL_MSG_SIZE];
        b.copy_from_slice(&bytes);
        let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        match decode_msg(&b) {
            Ok(m) => {
                prop_assert_eq!(magic, CONTROL_MAGIC);
                prop_assert_eq!(m.kind as u16, u16::from_le_bytes([b[6], b[7]]));
                prop_assert_eq!(m.vcpu, u32::from_le_bytes([b[8], b[9], b[10], b[11]]));
            }
            Err(ControlError::BadMagic(m)) => prop_assert_eq!(m, magic),
            Err(e) => prop_assert_eq!(magic, CONTROL_MAGIC, "{}", e),
        }
    }

    /// A valid magic and version with an arbitrary kind and arbitrary
    /// arguments: decode succeeds exactly for kinds 1..=7.
    #[test]
    fn decode_msg_checks_kind(kind in any::<u16>(), vcpu in any::<u32>(), phase in any::<u32>(),
                              arg in any::<[u64; 4]>()) {
        let r = decode_msg(&header(kind, vcpu, phase, arg));
        prop_assert_eq!(r.is_ok(), (1..=7).contains(&kind), "{:?}", r);
        if let Ok(m) = r {
            prop_assert_eq!((m.vcpu, m.phase, m.arg), (vcpu, phase, arg));
        }
    }

    /// Well-formed headers with pointers anywhere: resolve never panics, and
    /// what it accepts respects the ABI's limits and lies in guest RAM.
    #[test]
    fn resolve_follows_only_valid_pointers(kind in 1u16..=7, sender in 0usize..4, claimed in 0u32..4,
                                           phase in any::<u32>(), a0 in gpa(), a1 in len(),
                                           a2 in prop_oneof![len(), gpa()], fill in any::<u8>()) {
        let mem = mem();
        // Guest RAM full of one byte: names are valid UTF-8 or not, with or
        // without control characters, depending on `fill`.
        mem.write_slice(&vec![fill; LOW.1], GuestAddress(LOW.0)).expect("fill low");
        mem.write_slice(&vec![fill; HIGH.1], GuestAddress(HIGH.0)).expect("fill high");
        let arg = [a0, a1, a2, 0];
        let raw = decode_msg(&header(kind, claimed, phase, arg)).expect("valid header");
        match resolve(raw, sender, &mem) {
            Ok(req) => {
                prop_assert_eq!(req.vcpu, sender);
                prop_assert_eq!(claimed as usize, sender);
                prop_assert_eq!(req.body.kind() as u16, kind);
                check_body(&req.body, arg)?;
            }
            Err(ControlError::VcpuMismatch { claimed: c, actual }) => {
                prop_assert_eq!((c, actual), (claimed, sender));
                prop_assert_ne!(claimed as usize, sender);
            }
            Err(ControlError::OutOfRam { gpa, len, .. }) => prop_assert!(!in_ram(gpa, len)),
            Err(_) => {}
        }
    }

    /// The port as the vCPU loop drives it: any GPA (as a 32-bit `out`
    /// carries it) and any width. A message inside RAM always gets a reply.
    #[test]
    fn port_write_never_panics(gpa in prop_oneof![gpa(), any::<u32>().prop_map(u64::from)],
                               width in 0usize..9, msg in proptest::collection::vec(any::<u8>(), CONTROL_MSG_SIZE),
                               valid_header in any::<bool>(), kind in 0u16..9, args in any::<[u64; 4]>()) {
        let mem = mem();
        let gpa32 = gpa & 0xffff_ffff;
        let mut bytes = msg.clone();
        if valid_header {
            bytes = header(kind, 0, 1, args).to_vec();
        }
        let msg_in_ram = in_ram(gpa32, CONTROL_MSG_SIZE as u64);
        if msg_in_ram {
            mem.write_slice(&bytes, GuestAddress(gpa32)).expect("message in RAM");
        }
        let mut port = ControlPort::new(mem.clone());
        let data = (gpa32 as u32).to_le_bytes();
        let access: Vec<u8> = data.iter().copied().cycle().take(width).collect();
        let event = port.write(0, 0, &access);
        let Some(DeviceEvent::Control(result)) = event else {
            return Err(TestCaseError::fail(format!("no control event: {event:?}")));
        };
        if width != 4 {
            prop_assert_eq!(result, Err(ControlError::BadAccessWidth(width)));
            return Ok(());
        }
        if !msg_in_ram {
            let out_of_ram = matches!(result, Err(ControlError::OutOfRam { what: "control message", .. }));
            prop_assert!(out_of_ram, "{:?}", result);
            return Ok(());
        }
        let reply_at = GuestAddress(gpa32 + offset_of!(ControlMsg, reply) as u64);
        let reply: u64 = mem.read_obj(reply_at).expect("reply in RAM");
        prop_assert_eq!(reply, if result.is_ok() { REPLY_OK } else { REPLY_REJECTED });
        let mut read = [0xaau8; 4];
        port.read(0, 0, &mut read);
        prop_assert_eq!(read, [0xff; 4]);
    }
}
