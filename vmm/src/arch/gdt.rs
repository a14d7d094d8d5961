//! Per-vCPU GDT and 64-bit TSS.
//!
//! Each vCPU gets its own GDT (null, code64, data, TSS) and TSS, because IST1
//! must point at that vCPU's own interrupt stack and a TSS descriptor is busy
//! once loaded. The selectors are fixed by the guest ABI.
use ipivmm_abi::{CODE64_SELECTOR, DATA_SELECTOR, TSS_SELECTOR};
use kvm_bindings::kvm_segment;

/// 64-bit code: P, DPL 0, S, exec/read, accessed, L, G.
pub(crate) const CODE64_DESC: u64 = 0x00af_9b00_0000_ffff;
/// Data: P, DPL 0, S, read/write, accessed, D/B, G.
pub(crate) const DATA_DESC: u64 = 0x00cf_9300_0000_ffff;
/// Bytes of a 64-bit TSS.
pub(crate) const TSS_SIZE: u64 = 104;
/// Type of a busy 64-bit TSS: VMX requires TR to be busy in IA-32e mode.
pub(crate) const TSS_TYPE_BUSY: u8 = 0xb;
/// Bytes of the GDT: 3 8-byte entries and a 16-byte TSS descriptor.
pub(crate) const GDT_SIZE: usize = 40;
/// Offset of IST1 in the 64-bit TSS.
const TSS_IST1_OFFSET: usize = 36;
/// Offset of the I/O map base in the 64-bit TSS.
const TSS_IOMAP_OFFSET: usize = 102;

/// The two 8-byte halves of a 64-bit TSS descriptor.
pub(crate) fn tss_descriptor(base: u64) -> [u64; 2] {
    let limit = TSS_SIZE - 1;
    let low = (limit & 0xffff)
        | ((base & 0xff_ffff) << 16)
        | (u64::from(TSS_TYPE_BUSY) << 40)
        | (1 << 47) // present
        | (((limit >> 16) & 0xf) << 48)
        | (((base >> 24) & 0xff) << 56);
    [low, base >> 32]
}

/// The GDT of one vCPU, as bytes, with its TSS at `tss_base`.
pub(crate) fn gdt_bytes(tss_base: u64) -> [u8; GDT_SIZE] {
    let [tss_lo, tss_hi] = tss_descriptor(tss_base);
    let entries = [0u64, CODE64_DESC, DATA_DESC, tss_lo, tss_hi];
    let mut out = [0u8; GDT_SIZE];
    for (chunk, e) in out.chunks_exact_mut(8).zip(entries) {
        chunk.copy_from_slice(&e.to_le_bytes());
    }
    out
}

/// A 64-bit TSS whose IST1 is `ist1_top` and with no I/O bitmap.
pub(crate) fn tss_bytes(ist1_top: u64) -> [u8; TSS_SIZE as usize] {
    let mut tss = [0u8; TSS_SIZE as usize];
    tss[TSS_IST1_OFFSET..TSS_IST1_OFFSET + 8].copy_from_slice(&ist1_top.to_le_bytes());
    tss[TSS_IOMAP_OFFSET..TSS_IOMAP_OFFSET + 2].copy_from_slice(&(TSS_SIZE as u16).to_le_bytes());
    tss
}

/// Decode a code/data descriptor into the form KVM_SET_SREGS wants.
pub(crate) fn segment_from_descriptor(desc: u64, selector: u16) -> kvm_segment {
    let base = ((desc >> 16) & 0xff_ffff) | (((desc >> 56) & 0xff) << 24);
    let raw_limit = (desc & 0xffff) | (((desc >> 48) & 0xf) << 16);
    let g = ((desc >> 55) & 1) as u8;
    kvm_segment {
        base,
        limit: if g == 1 {
            ((raw_limit << 12) | 0xfff) as u32
        } else {
            raw_limit as u32
        },
        selector,
        type_: ((desc >> 40) & 0xf) as u8,
        present: ((desc >> 47) & 1) as u8,
        dpl: ((desc >> 45) & 3) as u8,
        db: ((desc >> 54) & 1) as u8,
        s: ((desc >> 44) & 1) as u8,
        l: ((desc >> 53) & 1) as u8,
        g,
        avl: ((desc >> 52) & 1) as u8,
        unusable: 0,
        padding: 0,
    }
}

/// CS for KVM_SET_SREGS.
pub(crate) fn code_segment() -> kvm_segment {
    segment_from_descriptor(CODE64_DESC, CODE64_SELECTOR)
}

/// DS/ES/FS/GS/SS for KVM_SET_SREGS.
pub(crate) fn data_segment() -> kvm_segment {
    segment_from_descriptor(DATA_DESC, DATA_SELECTOR)
}

/// TR for KVM_SET_SREGS.
pub(crate) fn task_segment(tss_base: u64) -> kvm_segment {
    kvm_segment {
        base: tss_base,
        limit: (TSS_SIZE - 1) as u32,
        selector: TSS_SELECTOR,
        type_: TSS_TYPE_BUSY,
        present: 1,
        dpl: 0,
        db: 0,
        s: 0,
        l: 0,
        g: 0,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_segment_is_long_mode() {
        let cs = code_segment();
        assert_eq!((cs.l, cs.db, cs.present, cs.s, cs.dpl), (1, 0, 1, 1, 0));
        assert_eq!(cs.type_, 0xb);
        assert_eq!(cs.limit, 0xffff_ffff);
        assert_eq!(cs.selector, 0x08);
    }

    #[test]
    fn data_segment_is_flat_writable() {
        let ds = data_segment();
        assert_eq!(
            (ds.base, ds.limit, ds.type_, ds.db, ds.l),
            (0, 0xffff_ffff, 3, 1, 0)
        );
    }

    #[test]
    fn tss_descriptor_encodes_base_limit_and_type() {
        let base = 0x1234_5678_9abc_def0u64;
        let [lo, hi] = tss_descriptor(base);
        assert_eq!(lo & 0xffff, TSS_SIZE - 1);
        assert_eq!((lo >> 16) & 0xff_ffff, base & 0xff_ffff);
        assert_eq!((lo >> 56) & 0xff, (base >> 24) & 0xff);
        assert_eq!((lo >> 40) & 0xf, 0xb);
        assert_eq!((lo >> 47) & 1, 1);
        assert_eq!(hi, base >> 32);
    }

    #[test]
    fn gdt_places_entries_at_abi_selectors() {
        let gdt = gdt_bytes(0x2_8000);
        let entry = |sel: u16| {
            let o = sel as usize;
            u64::from_le_bytes(gdt[o..o + 8].try_into().unwrap())
        };
        assert_eq!(entry(0), 0);
        assert_eq!(entry(CODE64_SELECTOR), CODE64_DESC);
        assert_eq!(entry(DATA_SELECTOR), DATA_DESC);
        assert_eq!(entry(TSS_SELECTOR), tss_descriptor(0x2_8000)[0]);
    }

    #[test]
    fn tss_holds_ist1_and_no_iomap() {
        let tss = tss_bytes(0xdead_b000);
        assert_eq!(
            u64::from_le_bytes(tss[36..44].try_into().unwrap()),
            0xdead_b000
        );
        assert_eq!(u16::from_le_bytes(tss[102..104].try_into().unwrap()), 104);
    }
}
