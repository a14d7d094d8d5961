//! Where a question this host cannot answer is answered: the lab command
//! that runs it on a real kvm_amd (QEMU, docs/lab.md) or kvm_intel (Bochs,
//! docs/lab-intel.md) under emulation, where the counts (exits, ICR-write
//! exits, polls) are the hardware module's and the timings are not. One
//! table for every surface that says "no answer here": the presets' dry
//! runs, `ipivmm host`, `ipivmm check`'s skips, the README.

/// What a question needs of the host that a software KVM (kvm_pvm) or a
/// host without it lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hardware {
    /// Intel APICv.
    Apicv,
    /// Intel IPI virtualization.
    Ipiv,
    /// AMD AVIC.
    Avic,
    /// AMD x2AVIC.
    X2avic,
    /// APICv or AVIC.
    ApicvOrAvic,
    /// A hardware KVM (kvm_intel or kvm_amd).
    HardwareKvm,
    /// Two CPU sockets.
    TwoSockets,
    /// KVM polling a halted vCPU (`kvm.halt_poll_ns` above 0).
    HaltPolling,
}

impl Hardware {
    /// Every kind, in the order the table lists them.
    pub const ALL: [Hardware; 8] = [
        Hardware::Apicv,
        Hardware::Ipiv,
        Hardware::Avic,
        Hardware::X2avic,
        Hardware::ApicvOrAvic,
        Hardware::HardwareKvm,
        Hardware::TwoSockets,
        Hardware::HaltPolling,
    ];

    /// Its name for people.
    pub fn name(self) -> &'static str {
        match self {
            Hardware::Apicv => "APICv",
            Hardware::Ipiv => "IPIv",
            Hardware::Avic => "AVIC",
            Hardware::X2avic => "x2AVIC",
            Hardware::ApicvOrAvic => "APICv or AVIC",
            Hardware::HardwareKvm => "a hardware KVM",
            Hardware::TwoSockets => "two sockets",
            Hardware::HaltPolling => "halt polling",
        }
    }

    /// The lab command that runs it (None: no lab has it).
    pub fn lab_command(self) -> Option<&'static str> {
        match self {
            // kvm_intel under Bochs, enable_apicv=Y enable_ipiv=Y, then
            // enable_ipiv=N: 0 against 1 ICR-write exit per IPI.
            Hardware::Apicv | Hardware::Ipiv => Some("scripts/lab/ipiv-smoke.sh"),
            // kvm_amd avic=1 under QEMU: sweep --preset avic-broadcast.
            Hardware::Avic => Some("cargo xtask lab avic --parts preset"),
            // The AVIC matrix: its x2APIC rows run on x2AVIC.
            Hardware::X2avic | Hardware::ApicvOrAvic => Some("cargo xtask lab avic --parts matrix"),
            Hardware::HardwareKvm => Some("cargo xtask lab"),
            // One boot of sweep --preset halt-polling on kvm_amd.
            Hardware::HaltPolling => Some("cargo xtask lab avic --parts halt-polling"),
            // The QEMU lab's L1 host on two sockets, each a NUMA node.
            Hardware::TwoSockets => {
                Some("cargo xtask lab avic --parts topology --sockets 2 --smp 4")
            }
        }
    }

    /// Where it is answered, in one line for people: the lab command, or
    /// that no lab has it.
    pub fn where_answered(self) -> String {
        match self.lab_command() {
            Some(cmd) => format!("{} in the lab (counts, not timings): {cmd}", self.name()),
            None => format!("{}: in no lab; on a host that has it", self.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind has its line, short enough to follow "this host: " within 120
    /// columns, and every lab command is one the docs describe.
    #[test]
    fn every_kind_says_where_it_is_answered_in_one_short_line() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let docs = ["docs/lab.md", "docs/lab-intel.md"]
            .map(|d| std::fs::read_to_string(root.join(d)).unwrap())
            .join("\n");
        for h in Hardware::ALL {
            let line = h.where_answered();
            assert!(line.len() <= 105 && !line.contains('\n'), "{line}");
            if let Some(cmd) = h.lab_command() {
                assert!(line.ends_with(cmd), "{line}");
                assert!(docs.contains(cmd), "{cmd} is in neither lab doc");
            }
        }
        assert_eq!(
            Hardware::Avic.where_answered(),
            "AVIC in the lab (counts, not timings): cargo xtask lab avic --parts preset"
        );
        assert!(root.join("scripts/lab/ipiv-smoke.sh").is_file());
    }
}
