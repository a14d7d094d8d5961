//! Raw field decoding against the 6.1, 6.12 and 6.18 formats.

use super::super::raw::{FieldReader, TypeCheck};
use super::formats::*;
use super::{fmt, raw};

/// (format text, has `requests`) for each kernel.
const EXITS: [(&str, bool); 3] = [
    (KVM_EXIT_6_1, false),
    (KVM_EXIT_6_12, false),
    (KVM_EXIT_6_18, true),
];

#[test]
fn kvm_exit_fields_sit_at_the_same_offsets_on_every_kernel() {
    for (text, has_requests) in EXITS {
        let f = fmt(text);
        let at = |name: &str| {
            let r = FieldReader::new(&f, &[name]).unwrap_or_else(|| panic!("{name}"));
            (r.offset(), r.size())
        };
        assert_eq!(at("exit_reason"), (8, 4));
        assert_eq!(at("guest_rip"), (16, 8));
        assert_eq!(at("isa"), (24, 4));
        assert_eq!(at("info1"), (32, 8));
        assert_eq!(at("info2"), (40, 8));
        assert_eq!(at("intr_info"), (48, 4));
        assert_eq!(at("error_code"), (52, 4));
        assert_eq!(at("vcpu_id"), (56, 4));
        assert_eq!(FieldReader::new(&f, &["requests"]).is_some(), has_requests);
        if has_requests {
            assert_eq!(at("requests"), (64, 8));
        }
    }
}

#[test]
fn reads_kvm_exit_values() {
    for (text, _) in EXITS {
        let f = fmt(text);
        let r = raw(
            &f,
            &[
                ("exit_reason", 0x8000_0021), // FAILED_VMENTRY | INVALID_STATE
                ("isa", 1),
                ("info1", 0xfee0_0300),
                ("vcpu_id", 3),
                ("common_pid", u64::from(u32::MAX)), // -1
            ],
        );
        let field = |n: &str| FieldReader::new(&f, &[n]).unwrap();
        assert_eq!(field("exit_reason").read_u32(&r), Some(0x8000_0021));
        assert_eq!(field("isa").read_u32(&r), Some(1));
        assert_eq!(field("info1").read_u64(&r), Some(0xfee0_0300));
        assert_eq!(field("vcpu_id").read_u64(&r), Some(3));
        assert_eq!(field("common_pid").read_i64(&r), Some(-1));
        assert_eq!(field("common_pid").read_u64(&r), Some(u64::from(u32::MAX)));
        assert_eq!(field("common_type").read_u64(&r), Some(f.id));
        assert!(TypeCheck::new(&f).matches(&r));
    }
}

#[test]
fn alternative_names_and_missing_fields() {
    let f = fmt(KVM_EXIT_6_1);
    let r = FieldReader::new(&f, &["reason", "exit_reason"]).unwrap();
    assert_eq!(r.offset(), 8);
    assert!(FieldReader::new(&f, &["requests"]).is_none());
    let e = FieldReader::require(&f, "kvm:kvm_exit", &["nope", "nada"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "event kvm:kvm_exit has no field nope|nada on this kernel (format changed; update the decoder)"
    );
}

#[test]
fn short_or_foreign_raw_data_reads_none() {
    let f = fmt(KVM_EXIT_6_12);
    let reason = FieldReader::new(&f, &["exit_reason"]).unwrap();
    assert_eq!(reason.read_u32(&[0; 11]), None);
    assert_eq!(reason.read_u32(&[]), None);
    let check = TypeCheck::new(&f);
    assert!(!check.matches(&[]));
    let entry = fmt(KVM_ENTRY_6_12);
    assert!(!check.matches(&raw(&entry, &[])));
    assert!(TypeCheck::new(&entry).matches(&raw(&entry, &[])));
}

#[test]
fn kvm_entry_formats() {
    for (text, immediate_exit, intr_info) in [
        (KVM_ENTRY_6_1, false, false),
        (KVM_ENTRY_6_12, true, false),
        (KVM_ENTRY_6_18, true, true),
    ] {
        let f = fmt(text);
        let vcpu = FieldReader::new(&f, &["vcpu_id"]).unwrap();
        assert_eq!((vcpu.offset(), vcpu.size()), (8, 4));
        let rip = FieldReader::new(&f, &["rip"]).unwrap();
        assert_eq!((rip.offset(), rip.size()), (16, 8));
        let ie = FieldReader::new(&f, &["immediate_exit"]);
        assert_eq!(ie.is_some(), immediate_exit);
        if let Some(ie) = ie {
            assert_eq!((ie.offset(), ie.size()), (24, 1));
            let r = raw(&f, &[("immediate_exit", 1), ("rip", 0xfff0)]);
            assert_eq!(ie.read_bool(&r), Some(true));
            assert_eq!(rip.read_u64(&r), Some(0xfff0));
        }
        assert_eq!(FieldReader::new(&f, &["intr_info"]).is_some(), intr_info);
    }
}

#[test]
fn sign_extension_by_size() {
    let t = "name: x\nID: 5\nformat:\n\
             \tfield:short a;\toffset:0;\tsize:2;\tsigned:1;\n\
             \tfield:char b;\toffset:2;\tsize:1;\tsigned:1;\n\
             \tfield:u8 c;\toffset:3;\tsize:1;\tsigned:0;\n\
             \tfield:char d[5];\toffset:4;\tsize:5;\tsigned:1;\n";
    let f = fmt(t);
    let bytes = [0xfe, 0xff, 0x80, 0x80, 0, 0, 0, 0, 0];
    let r = |n: &str| FieldReader::new(&f, &[n]).unwrap();
    assert_eq!(r("a").read_i64(&bytes), Some(-2));
    assert_eq!(r("b").read_i64(&bytes), Some(-128));
    assert_eq!(r("c").read_i64(&bytes), Some(128));
    // Arrays and odd sizes are not scalar fields.
    assert!(FieldReader::new(&f, &["d"]).is_none());
}
