//! Boot register state: every vCPU starts in 64-bit long mode at the payload entry.
use super::gdt::{code_segment, data_segment, task_segment, GDT_SIZE};
use crate::vm::layout;
use kvm_bindings::{kvm_regs, kvm_sregs};

/// CR0: PE, MP, ET, NE, WP, PG.
pub const CR0_LONG_MODE: u64 = 0x8005_0033;
/// CR4: PAE (needed for long mode).
pub const CR4_PAE: u64 = 1 << 5;
/// EFER: LME | LMA.
pub const EFER_LONG_MODE: u64 = (1 << 8) | (1 << 10);

/// Special registers of vCPU `index`, starting from what KVM reported.
pub fn boot_sregs(mut s: kvm_sregs, index: usize) -> kvm_sregs {
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
pub fn boot_regs(entry: u64, index: usize) -> kvm_regs {
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
    fn regs_follow_entry_convention() {
        let r = boot_regs(0x10_1000, 2);
        assert_eq!(r.rip, 0x10_1000);
        assert_eq!(r.rdi, layout::BOOT_INFO);
        assert_eq!(r.rsi, 2);
        assert_eq!(r.rsp, layout::stack_top(2));
        assert_eq!(r.rflags & (1 << 9), 0, "interrupts off at entry");
    }
}
