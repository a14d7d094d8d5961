//! The BootInfo block: built from the configuration, encoded little-endian
//! field by field (no `unsafe` transmute of the struct).
use crate::arch::layout;
use crate::config::VmConfig;
use ipivmm_abi::{
    BootInfo, ABI_VERSION, BOOT_APIC_IDS, BOOT_INFO_MAGIC, BOOT_INFO_SIZE, MAX_VCPUS,
};

/// The BootInfo for `config` with APIC IDs `apic_ids`, TSC frequency
/// `tsc_khz` and `BOOT_FLAG_*` bits `flags`.
pub fn build(config: &VmConfig, apic_ids: &[u32], tsc_khz: u64, flags: u32) -> BootInfo {
    let mut ids = [0u32; BOOT_APIC_IDS];
    let mut ext = [0u32; MAX_VCPUS - BOOT_APIC_IDS];
    for (slot, id) in ids.iter_mut().chain(ext.iter_mut()).zip(apic_ids) {
        *slot = *id;
    }
    BootInfo {
        magic: BOOT_INFO_MAGIC,
        abi_version: ABI_VERSION,
        reserved0: 0,
        vcpu_count: config.vcpus as u32,
        tsc_khz,
        apic_mode: config.apic as u32,
        ipi_path: config.ipi as u32,
        workload: config.workload as u32,
        target_wait: config.target_wait as u32,
        iterations: config.iterations,
        warmup: config.warmup,
        ipi_vector: u32::from(config.ipi_vector),
        flags,
        scratch_base: layout::scratch_base(config.vcpus),
        scratch_stride: layout::scratch_stride(config.memory_bytes, config.vcpus),
        params: config.params,
        apic_ids: ids,
        halt_settle_ns: u64::try_from(config.halt_settle.as_nanos()).unwrap_or(u64::MAX),
        apic_ids_ext: ext,
        ipi_delay_cycles: config.ipi_delay_cycles,
    }
}

/// BootInfo as the bytes the guest reads.
pub fn encode(b: &BootInfo) -> Vec<u8> {
    let mut out = Vec::with_capacity(BOOT_INFO_SIZE);
    out.extend_from_slice(&b.magic.to_le_bytes());
    out.extend_from_slice(&b.abi_version.to_le_bytes());
    out.extend_from_slice(&b.reserved0.to_le_bytes());
    out.extend_from_slice(&b.vcpu_count.to_le_bytes());
    out.extend_from_slice(&b.tsc_khz.to_le_bytes());
    for v in [b.apic_mode, b.ipi_path, b.workload, b.target_wait] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&b.iterations.to_le_bytes());
    out.extend_from_slice(&b.warmup.to_le_bytes());
    out.extend_from_slice(&b.ipi_vector.to_le_bytes());
    out.extend_from_slice(&b.flags.to_le_bytes());
    out.extend_from_slice(&b.scratch_base.to_le_bytes());
    out.extend_from_slice(&b.scratch_stride.to_le_bytes());
    b.params
        .iter()
        .for_each(|p| out.extend_from_slice(&p.to_le_bytes()));
    b.apic_ids
        .iter()
        .for_each(|p| out.extend_from_slice(&p.to_le_bytes()));
    out.extend_from_slice(&b.halt_settle_ns.to_le_bytes());
    b.apic_ids_ext
        .iter()
        .for_each(|p| out.extend_from_slice(&p.to_le_bytes()));
    out.extend_from_slice(&b.ipi_delay_cycles.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    fn field_u64(bytes: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(bytes[off..off + 8].try_into().unwrap())
    }

    fn field_u32(bytes: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap())
    }

    #[test]
    fn encoding_matches_repr_c_offsets() {
        let cfg = VmConfig {
            vcpus: 3,
            ipi_delay_cycles: 12_345,
            iterations: 77,
            warmup: 5,
            params: [1, 2, 3, 4, 5, 6, 7, 8],
            ..Default::default()
        };
        let bi = build(&cfg, &[0, 1, 7], 2_500_000, 1);
        let bytes = encode(&bi);
        assert_eq!(bytes.len(), BOOT_INFO_SIZE);
        assert_eq!(
            field_u64(&bytes, offset_of!(BootInfo, magic)),
            BOOT_INFO_MAGIC
        );
        assert_eq!(field_u32(&bytes, offset_of!(BootInfo, vcpu_count)), 3);
        assert_eq!(field_u64(&bytes, offset_of!(BootInfo, tsc_khz)), 2_500_000);
        assert_eq!(field_u64(&bytes, offset_of!(BootInfo, iterations)), 77);
        assert_eq!(field_u64(&bytes, offset_of!(BootInfo, warmup)), 5);
        assert_eq!(
            field_u64(&bytes, offset_of!(BootInfo, ipi_delay_cycles)),
            12_345
        );
        assert_eq!(field_u32(&bytes, offset_of!(BootInfo, ipi_vector)), 0x40);
        assert_eq!(field_u32(&bytes, offset_of!(BootInfo, flags)), 1);
        assert_eq!(
            field_u64(&bytes, offset_of!(BootInfo, scratch_base)),
            layout::scratch_base(3)
        );
        assert_eq!(field_u64(&bytes, offset_of!(BootInfo, params) + 8 * 7), 8);
        let ids = offset_of!(BootInfo, apic_ids);
        assert_eq!(field_u32(&bytes, ids + 8), 7);
        assert_eq!(field_u32(&bytes, ids + 12), 0);
        // The first ABI's offsets stay where they were.
        assert_eq!(ids, 144);
        assert_eq!(offset_of!(BootInfo, halt_settle_ns), 1160);
    }

    #[test]
    fn ids_past_254_go_to_the_extension() {
        let cfg = VmConfig {
            vcpus: 1024,
            ..Default::default()
        };
        let all: Vec<u32> = (0..1024).map(|i| i + 1000).collect();
        let bi = build(&cfg, &all, 0, 0);
        let bytes = encode(&bi);
        assert_eq!(bytes.len(), BOOT_INFO_SIZE);
        for v in [0usize, 253, 254, 255, 1023] {
            assert_eq!(bi.apic_id(v), all[v], "{v}");
        }
        let ext = offset_of!(BootInfo, apic_ids_ext);
        assert_eq!(ext, 1168);
        assert_eq!(field_u32(&bytes, ext), 1254);
        assert_eq!(field_u32(&bytes, ext + 4 * (1023 - 254)), 2023);
        assert_eq!(bi.apic_id(1024), 0);
        assert_eq!(offset_of!(BootInfo, ipi_delay_cycles), 4248);
        assert_eq!(BOOT_INFO_SIZE, 4256);
    }
}
