//! Logical destinations (SDM Vol. 3A 11.6.2.2, x2APIC 11.12.10) and the
//! number of APICs an ICR reaches, as KVM's `kvm_apic_match_dest` decides
//! it: what the guest SDK counts in `ipis_sent`.

use super::icr::{DeliveryMode, Destination, Icr, X2APIC_BROADCAST, XAPIC_BROADCAST};
use crate::ApicMode;

/// How logical IDs are laid out.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogicalModel {
    /// xAPIC flat model (DFR = `0xFFFF_FFFF`): an 8-bit logical ID per APIC
    /// (LDR bits 31:24), one bit each; a destination reaches every APIC
    /// sharing a bit with it. The SDK gives vCPU `i < 8` bit `i`.
    XapicFlat = 1,
    /// xAPIC cluster model (DFR = `0x0FFF_FFFF`): logical ID bits 7:4 =
    /// cluster, 3:0 = one bit per member (4 per cluster). The SDK puts
    /// vCPU `i < 60` in cluster `i / 4` as member `i % 4` (clusters 0..15,
    /// never 15: `0xFF` is the broadcast).
    XapicCluster = 2,
    /// x2APIC cluster model: the read-only LDR, [`x2apic_logical_id`] of
    /// the APIC ID (cluster in bits 31:16, one of 16 bits in 15:0).
    X2apicCluster = 3,
}

impl LogicalModel {
    /// Decodes the raw value (`None` for 0 and unknown values).
    pub const fn from_raw(raw: u32) -> Option<LogicalModel> {
        match raw {
            1 => Some(LogicalModel::XapicFlat),
            2 => Some(LogicalModel::XapicCluster),
            3 => Some(LogicalModel::X2apicCluster),
            _ => None,
        }
    }

    /// The model an APIC in `mode` uses unless told otherwise: flat for
    /// xAPIC (as Linux up to 8 CPUs), cluster for x2APIC (the only one).
    pub const fn default_for(mode: ApicMode) -> LogicalModel {
        match mode {
            ApicMode::Xapic => LogicalModel::XapicFlat,
            ApicMode::X2apic => LogicalModel::X2apicCluster,
        }
    }

    /// The APIC mode whose registers hold this model.
    pub const fn apic_mode(self) -> ApicMode {
        match self {
            LogicalModel::XapicFlat | LogicalModel::XapicCluster => ApicMode::Xapic,
            LogicalModel::X2apicCluster => ApicMode::X2apic,
        }
    }

    /// The xAPIC destination format register value (`None` for x2APIC,
    /// which has no DFR).
    pub const fn dfr(self) -> Option<u32> {
        match self {
            LogicalModel::XapicFlat => Some(0xffff_ffff),
            LogicalModel::XapicCluster => Some(0x0fff_ffff),
            LogicalModel::X2apicCluster => None,
        }
    }

    /// The logical ID the SDK gives vCPU `vcpu` of APIC ID `apic_id`, or
    /// `None` when the model has no room for it (flat: 8 vCPUs; cluster:
    /// 60). xAPIC IDs are 8 bits (LDR bits 31:24); x2APIC's is the LDR.
    pub const fn logical_id(self, vcpu: usize, apic_id: u32) -> Option<u32> {
        match self {
            LogicalModel::XapicFlat if vcpu < 8 => Some(1 << vcpu),
            LogicalModel::XapicCluster if vcpu < 60 => {
                Some(((vcpu / 4) as u32) << 4 | 1 << (vcpu % 4))
            }
            LogicalModel::X2apicCluster => Some(x2apic_logical_id(apic_id)),
            _ => None,
        }
    }

    /// The broadcast destination, which every APIC matches.
    pub const fn broadcast(self) -> u32 {
        match self {
            LogicalModel::XapicFlat | LogicalModel::XapicCluster => XAPIC_BROADCAST,
            LogicalModel::X2apicCluster => X2APIC_BROADCAST,
        }
    }

    /// The group one ICR can address several members of: always 0 in the
    /// flat model, else the cluster.
    pub const fn group(self, id: u32) -> u32 {
        match self {
            LogicalModel::XapicFlat => 0,
            LogicalModel::XapicCluster => id >> 4 & 0xf,
            LogicalModel::X2apicCluster => id >> 16,
        }
    }

    /// Whether an APIC of logical ID `id` accepts logical destination
    /// `dest` (KVM's `kvm_apic_match_logical_addr`): the broadcast always;
    /// flat: a shared bit; cluster: the same cluster and a shared member bit.
    /// An APIC whose ID is 0 (xAPIC LDR never written) matches only the
    /// broadcast.
    pub const fn matches(self, id: u32, dest: u32) -> bool {
        if dest == self.broadcast() {
            return true;
        }
        match self {
            LogicalModel::XapicFlat => id & dest & 0xff != 0,
            LogicalModel::XapicCluster => id >> 4 & 0xf == dest >> 4 & 0xf && id & dest & 0xf != 0,
            LogicalModel::X2apicCluster => id >> 16 == dest >> 16 && id & dest & 0xffff != 0,
        }
    }
}

/// The x2APIC logical ID (read-only LDR) of x2APIC ID `apic_id`: cluster
/// `apic_id >> 4` in bits 31:16, bit `apic_id & 15` in bits 15:0.
pub const fn x2apic_logical_id(apic_id: u32) -> u32 {
    ((apic_id >> 4) << 16) | (1 << (apic_id & 0xf))
}

/// The number of vCPUs `icr` delivers to when vCPU `sender` of `vcpus`
/// writes it in APIC mode `mode`: the count the SDK adds to `ipis_sent`.
///
/// `apic_id(v)` is vCPU `v`'s APIC ID; `logical(v)` its logical model and
/// ID (`None`: none set up, as an xAPIC whose LDR was never written).
/// Shorthands: self 1, all `vcpus`, all but self `vcpus - 1`; a physical
/// destination: the vCPUs with that APIC ID (the broadcast ID: all); a
/// logical one: those whose ID [`LogicalModel::matches`] it. Lowest-priority
/// delivery goes to one of them (KVM picks it), INIT level de-assert to
/// none (KVM drops it).
pub fn icr_targets(
    icr: Icr,
    mode: ApicMode,
    vcpus: usize,
    _sender: usize,
    apic_id: impl Fn(usize) -> u32,
    logical: impl Fn(usize) -> Option<(LogicalModel, u32)>,
) -> u64 {
    if icr.is_init_deassert() {
        return 0;
    }
    let broadcast = match mode {
        ApicMode::Xapic => XAPIC_BROADCAST,
        ApicMode::X2apic => X2APIC_BROADCAST,
    };
    let n = vcpus as u64;
    let matched = match icr.destination() {
        Destination::SelfOnly => 1,
        Destination::AllIncludingSelf => n,
        Destination::AllButSelf => n.saturating_sub(1),
        Destination::Physical(d) if d == broadcast => n,
        Destination::Logical(d) if d == broadcast => n,
        Destination::Physical(d) => (0..vcpus).filter(|&v| apic_id(v) == d).count() as u64,
        Destination::Logical(d) => (0..vcpus)
            .filter(|&v| matches!(logical(v), Some((m, id)) if m.matches(id, d)))
            .count() as u64,
    };
    match icr.delivery_mode() {
        Some(DeliveryMode::LowestPriority) => matched.min(1),
        _ => matched,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x2apic_logical_ids_follow_clusters() {
        assert_eq!(x2apic_logical_id(0), 0x0000_0001);
        assert_eq!(x2apic_logical_id(15), 0x0000_8000);
        assert_eq!(x2apic_logical_id(16), 0x0001_0001);
        assert_eq!(x2apic_logical_id(0x25), 0x0002_0020);
    }

    #[test]
    fn the_sdk_assigns_ids_per_model() {
        use LogicalModel::*;
        assert_eq!(XapicFlat.logical_id(0, 9), Some(0x01));
        assert_eq!(XapicFlat.logical_id(7, 9), Some(0x80));
        assert_eq!(XapicFlat.logical_id(8, 9), None);
        assert_eq!(XapicCluster.logical_id(0, 0), Some(0x01));
        assert_eq!(XapicCluster.logical_id(3, 0), Some(0x08));
        assert_eq!(XapicCluster.logical_id(4, 0), Some(0x11));
        assert_eq!(XapicCluster.logical_id(59, 0), Some(0xe8));
        assert_eq!(XapicCluster.logical_id(60, 0), None);
        assert_eq!(X2apicCluster.logical_id(600, 0x21), Some(0x0002_0002));
        assert_eq!(XapicFlat.dfr(), Some(0xffff_ffff));
        assert_eq!(XapicCluster.dfr(), Some(0x0fff_ffff));
        assert_eq!(X2apicCluster.dfr(), None);
        for m in [XapicFlat, XapicCluster, X2apicCluster] {
            assert_eq!(LogicalModel::from_raw(m as u32), Some(m));
        }
        assert_eq!(LogicalModel::from_raw(0), None);
    }

    #[test]
    fn matching_follows_kvm() {
        use LogicalModel::*;
        // Flat: any shared bit; 0xFF is everyone, even an unset LDR.
        assert!(XapicFlat.matches(0x04, 0x06));
        assert!(!XapicFlat.matches(0x04, 0x03));
        assert!(XapicFlat.matches(0, 0xff));
        assert!(!XapicFlat.matches(0, 0x7f));
        // Cluster: same cluster nibble and a shared member bit.
        assert!(XapicCluster.matches(0x12, 0x1e));
        assert!(!XapicCluster.matches(0x12, 0x0e));
        assert!(!XapicCluster.matches(0x12, 0x11));
        assert!(XapicCluster.matches(0x12, 0xff));
        // x2APIC: cluster in 31:16, bitmap in 15:0; only ~0 broadcasts.
        assert!(X2apicCluster.matches(0x0003_0004, 0x0003_000c));
        assert!(!X2apicCluster.matches(0x0003_0004, 0x0002_000c));
        assert!(!X2apicCluster.matches(0x0003_0004, 0x0000_00ff));
        assert!(X2apicCluster.matches(0x0003_0004, 0xffff_ffff));
        assert_eq!(XapicCluster.group(0x2c), 2);
        assert_eq!(X2apicCluster.group(0x0005_0001), 5);
        assert_eq!(XapicFlat.group(0x80), 0);
    }

    /// 6 vCPUs with APIC IDs 0, 2, 4, ... (as with two threads per core).
    fn targets(icr: Icr, mode: ApicMode, model: Option<LogicalModel>) -> u64 {
        let apic = |v: usize| 2 * v as u32;
        let logical = |v: usize| {
            let m = model?;
            Some((m, m.logical_id(v, apic(v))?))
        };
        icr_targets(icr, mode, 6, 1, apic, logical)
    }

    #[test]
    fn targets_by_destination() {
        use ApicMode::*;
        let f = Icr::fixed(0x40);
        assert_eq!(targets(f.self_only(), Xapic, None), 1);
        assert_eq!(targets(f.all_including_self(), Xapic, None), 6);
        assert_eq!(targets(f.all_but_self(), X2apic, None), 5);
        assert_eq!(targets(f.physical(4), Xapic, None), 1);
        assert_eq!(targets(f.physical(3), Xapic, None), 0, "no vCPU has ID 3");
        assert_eq!(targets(f.physical(0xff), Xapic, None), 6);
        assert_eq!(targets(f.physical(0xff), X2apic, None), 0);
        assert_eq!(targets(f.physical(X2APIC_BROADCAST), X2apic, None), 6);
        let flat = Some(LogicalModel::XapicFlat);
        assert_eq!(targets(f.logical(0b10_1110), Xapic, flat), 4);
        assert_eq!(targets(f.logical(0xc0), Xapic, flat), 0);
        assert_eq!(
            targets(f.logical(0xff), Xapic, None),
            6,
            "broadcast needs no LDR"
        );
        assert_eq!(
            targets(f.logical(0x01), Xapic, None),
            0,
            "LDR never written"
        );
        let cluster = Some(LogicalModel::XapicCluster);
        assert_eq!(targets(f.logical(0x0f), Xapic, cluster), 4);
        assert_eq!(targets(f.logical(0x13), Xapic, cluster), 2);
        // x2APIC IDs 0..10 by 2: all in cluster 0, bits 0, 2, 4, ...
        let x2 = Some(LogicalModel::X2apicCluster);
        assert_eq!(targets(f.logical(0x0000_0555), X2apic, x2), 6);
        assert_eq!(targets(f.logical(0x0000_0014), X2apic, x2), 2);
        assert_eq!(targets(f.logical(0x0001_0014), X2apic, x2), 0);
    }

    #[test]
    fn targets_by_delivery_mode() {
        use ApicMode::*;
        let flat = Some(LogicalModel::XapicFlat);
        let lp = Icr::lowest_priority(0x40);
        assert_eq!(targets(lp.logical(0x3e), Xapic, flat), 1);
        assert_eq!(targets(lp.logical(0xc0), Xapic, flat), 0);
        assert_eq!(targets(lp.all_but_self(), Xapic, None), 1);
        assert_eq!(targets(lp.physical(2), X2apic, None), 1);
        assert_eq!(targets(Icr::nmi().all_but_self(), X2apic, None), 5);
        assert_eq!(targets(Icr::nmi().logical(0x06), Xapic, flat), 2);
        assert_eq!(targets(Icr::init().physical(2), Xapic, None), 1);
        assert_eq!(targets(Icr::init_deassert().physical(2), Xapic, None), 0);
        assert_eq!(targets(Icr::startup(0x60).all_but_self(), Xapic, None), 5);
    }
}
