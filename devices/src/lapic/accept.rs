//! How one local APIC recognises a message as its own (destination
//! matching, KVM's `kvm_apic_match_physical_addr`/`_logical_addr`) and
//! latches what it accepts (SDM 11.6, KVM's `__apic_accept_irq`).

use super::regs::{DFR_CLUSTER, DFR_FLAT};
use super::state::Lapic;

impl Lapic {
    /// Records a fixed interrupt in the IRR (edge: TMR cleared). Returns
    /// whether the vector was already pending (coalesced).
    pub(super) fn accept_fixed(&mut self, vector: u8) -> bool {
        self.tmr.remove(vector);
        let coalesced = self.irr.insert(vector);
        self.counters.ipis_delivered += 1;
        if coalesced {
            self.counters.ipis_coalesced += 1;
        }
        coalesced
    }

    /// Latches an NMI.
    pub(super) fn accept_nmi(&mut self) {
        self.nmi_pending = true;
        self.counters.nmis += 1;
    }

    /// Latches an INIT (which cancels an earlier, untaken SIPI).
    pub(super) fn accept_init(&mut self) {
        self.init_pending = true;
        self.sipi_pending = None;
        self.counters.inits += 1;
    }

    /// Latches a start-up IPI.
    pub(super) fn accept_sipi(&mut self, vector: u8) {
        self.sipi_pending = Some(vector);
        self.counters.sipis += 1;
    }

    /// Logs error bits, visible in the ESR after its next write.
    pub(super) fn record_error(&mut self, bits: u32) {
        self.esr_pending |= bits;
    }

    /// Whether a physical destination names this APIC (or broadcasts).
    pub(super) fn matches_physical(&self, dest: u32) -> bool {
        if self.is_x2apic() {
            dest == u32::MAX || dest == self.initial_id
        } else {
            dest == 0xFF || dest == u32::from(self.xapic_id)
        }
    }

    /// Whether a logical destination names this APIC (or broadcasts):
    /// x2APIC cluster/bitmap, xAPIC flat (LDR bits & dest) or cluster.
    pub(super) fn matches_logical(&self, dest: u32) -> bool {
        if self.is_x2apic() {
            let ldr = self.ldr();
            return dest == u32::MAX || (ldr >> 16 == dest >> 16 && ldr & dest & 0xFFFF != 0);
        }
        if dest == 0xFF {
            return true;
        }
        let logical_id = self.ldr >> 24;
        match self.dfr {
            DFR_FLAT => logical_id & dest != 0,
            DFR_CLUSTER => logical_id >> 4 == dest >> 4 && logical_id & dest & 0xF != 0,
            _ => false,
        }
    }
}
