//! Boot register state: every vCPU starts in 64-bit long mode at the payload
//! entry. Also the states an INIT and a start-up IPI leave a vCPU in, which
//! the VMM applies itself without an in-kernel LAPIC (`--irqchip user`), as
//! KVM's `kvm_vcpu_reset(vcpu, init_event = true)` and
//! `kvm_vcpu_deliver_sipi_vector` do (SDM vol. 3, 10.1 table "IA-32
//! Processor States Following Power-up, Reset, or INIT").
use super::gdt::{code_segment, data_segment, task_segment, GDT_SIZE};
use crate::arch::layout;
use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};

/// CR0: PE, MP, ET, NE, WP, PG.
pub(crate) const CR0_LONG_MODE: u64 = 0x8005_0033;
/// CR4: PAE (needed for long mode).
pub(crate) const CR4_PAE: u64 = 1 << 5;
/// EFER: LME | LMA.
pub(crate) const EFER_LONG_MODE: u64 = (1 << 8) | (1 << 10);

/// Special registers of vCPU `index`, starting from what KVM reported.
pub(crate) fn boot_sregs(mut s: kvm_sregs, index: usize) -> kvm_sregs {
    let data = data_segment();
    s.cs = code_segment();
    s.ds = data;
    s.es = data;
    s.fs = data;
    s.gs = data;
    s.ss = data;
    s.tr = task_segment(layout::tss_addr(index));
    s.gdt.base = layout::gdt_addr(index);
    s.gdt.limit = (GDT_SIZE - 1) as u16;
    // The payload installs its own IDT before enabling interrupts.
    s.idt.base = 0;
    s.idt.limit = 0;
    s.cr0 = CR0_LONG_MODE;
    s.cr3 = layout::PML4;
    s.cr4 = CR4_PAE;
    s.efer = EFER_LONG_MODE;
    s
}

/// General registers of vCPU `index`: the ABI's entry convention.
pub(crate) fn boot_regs(entry: u64, index: usize) -> kvm_regs {
    kvm_regs {
        rip: entry,
        rsp: layout::stack_top(index),
        rbp: 0,
        rdi: layout::BOOT_INFO,
        rsi: index as u64,
        rflags: 0x2,
        ..Default::default()
    }
}

/// CR0 after INIT: ET, with CD and NW kept from before (KVM keeps them on
/// an INIT, sets them on a RESET).
pub(crate) const CR0_ET: u64 = 1 << 4;
/// CR0.NW | CR0.CD.
const CR0_NW_CD: u64 = (1 << 29) | (1 << 30);

/// A real-mode segment: `selector`, base `selector << 4` unless given,
/// limit 0xFFFF, present, of `type_` (0xB code / 3 data / 2 LDT / 0xB TSS).
fn real_segment(selector: u16, base: u64, type_: u8, s: u8) -> kvm_segment {
    kvm_segment {
        base,
        limit: 0xffff,
        selector,
        type_,
        present: 1,
        s,
        ..Default::default()
    }
}

/// General registers after INIT: `rip` 0xFFF0, `rflags` 2, `rdx` the
/// processor signature (CPUID.1:EAX), the rest 0.
pub(crate) fn init_regs(signature: u32) -> kvm_regs {
    kvm_regs {
        rip: 0xfff0,
        rflags: 0x2,
        rdx: u64::from(signature),
        ..Default::default()
    }
}

/// Special registers after INIT, from the vCPU's current ones: real mode,
/// CS 0xF000 based at 0xFFFF0000 (the reset vector 0xFFFFFFF0), data
/// segments 0, GDT/IDT base 0 limit 0xFFFF, CR0 = ET (CD/NW kept), CR2,
/// CR3, CR4, CR8 and EFER 0; the APIC base is not INIT's to change.
pub(crate) fn init_sregs(mut s: kvm_sregs) -> kvm_sregs {
    let data = real_segment(0, 0, 3, 1);
    s.cs = real_segment(0xf000, 0xffff_0000, 0xb, 1);
    s.ds = data;
    s.es = data;
    s.fs = data;
    s.gs = data;
    s.ss = data;
    s.ldt = real_segment(0, 0, 2, 0);
    s.tr = real_segment(0, 0, 0xb, 0);
    s.gdt.base = 0;
    s.gdt.limit = 0xffff;
    s.idt.base = 0;
    s.idt.limit = 0xffff;
    s.cr0 = CR0_ET | (s.cr0 & CR0_NW_CD);
    s.cr2 = 0;
    s.cr3 = 0;
    s.cr4 = 0;
    s.cr8 = 0;
    s.efer = 0;
    s
}

/// A start-up IPI of `vector` on a vCPU waiting for it: real mode at
/// `vector << 12` (CS = `vector << 8`, base `vector << 12`, IP 0).
pub(crate) fn sipi_start(regs: &mut kvm_regs, sregs: &mut kvm_sregs, vector: u8) {
    sregs.cs.selector = u16::from(vector) << 8;
    sregs.cs.base = u64::from(vector) << 12;
    regs.rip = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sregs_enter_long_mode_with_per_vcpu_tables() {
        let s = boot_sregs(kvm_sregs::default(), 3);
        assert_eq!(s.efer & EFER_LONG_MODE, EFER_LONG_MODE);
        assert_ne!(s.cr0 & 1, 0, "PE");
        assert_ne!(s.cr0 & (1 << 31), 0, "PG");
        assert_ne!(s.cr4 & CR4_PAE, 0);
        assert_eq!(s.cr3, layout::PML4);
        assert_eq!(s.gdt.base, layout::gdt_addr(3));
        assert_eq!(s.tr.base, layout::tss_addr(3));
        assert_eq!(s.cs.l, 1);
    }

    #[test]
    fn init_then_sipi_starts_in_real_mode_at_the_vector() {
        let long = boot_sregs(kvm_sregs::default(), 1);
        let mut s = init_sregs(long);
        let mut r = init_regs(0xc06f2);
        assert_eq!((r.rip, r.rflags, r.rdx), (0xfff0, 2, 0xc06f2));
        assert_eq!(s.cs.base + r.rip, 0xffff_fff0, "the reset vector");
        assert_eq!((s.cr0, s.cr3, s.cr4, s.efer), (CR0_ET, 0, 0, 0));
        assert_eq!((s.cs.l, s.cs.db, s.ds.base), (0, 0, 0));
        // CD/NW survive an INIT.
        let cached = kvm_sregs {
            cr0: CR0_LONG_MODE | CR0_NW_CD,
            ..long
        };
        assert_eq!(init_sregs(cached).cr0, CR0_ET | CR0_NW_CD);
        sipi_start(&mut r, &mut s, 0x60);
        assert_eq!((s.cs.selector, s.cs.base, r.rip), (0x6000, 0x6_0000, 0));
    }

    #[test]
    fn regs_follow_entry_convention() {
        let r = boot_regs(0x10_1000, 2);
        assert_eq!(r.rip, 0x10_1000);
        assert_eq!(r.rdi, layout::BOOT_INFO);
        assert_eq!(r.rsi, 2);
        assert_eq!(r.rsp, layout::stack_top(2));
        assert_eq!(r.rflags & (1 << 9), 0, "interrupts off at entry");
    }
}
