//! `KVM_HC_SEND_IPI`, the KVM PV IPI hypercall: its number, its CPUID bit
//! and the split of a destination set into 128-bit bitmap calls.

/// KVM hypercall number of the PV IPI (`KVM_HC_SEND_IPI`).
pub const KVM_HC_SEND_IPI: u64 = 10;
/// CPUID 0x40000001 EAX bit advertising `KVM_HC_SEND_IPI` (`KVM_FEATURE_PV_SEND_IPI`).
pub const KVM_FEATURE_PV_SEND_IPI_BIT: u32 = 11;
/// Destinations one `KVM_HC_SEND_IPI` covers: a 128-bit bitmap.
pub const PV_IPI_BITMAP_BITS: u32 = 128;

/// One `KVM_HC_SEND_IPI` call: bit `i` of `bitmap` (bits 0..64 in `bitmap[0]`,
/// the hypercall's `rbx`; 64..128 in `bitmap[1]`, its `rcx`) targets APIC ID
/// `min_apic_id + i` (`rdx`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PvIpiCall {
    /// Destination bitmap, low half first.
    pub bitmap: [u64; 2],
    /// APIC ID of bit 0.
    pub min_apic_id: u32,
}

impl PvIpiCall {
    /// Number of destinations in this call.
    pub const fn targets(&self) -> u32 {
        self.bitmap[0].count_ones() + self.bitmap[1].count_ones()
    }

    fn from_u128(bits: u128, min_apic_id: u32) -> Self {
        Self {
            bitmap: [bits as u64, (bits >> 64) as u64],
            min_apic_id,
        }
    }
}

/// Splits a destination set into `KVM_HC_SEND_IPI` calls, the way Linux's
/// `__send_ipi_mask` does: grow one 128-bit window while every ID fits (also
/// downwards, by shifting), and flush it when an ID falls outside. Duplicate
/// IDs are merged. Returns the number of calls emitted.
pub fn pv_ipi_calls<I, F>(apic_ids: I, mut emit: F) -> usize
where
    I: IntoIterator<Item = u32>,
    F: FnMut(PvIpiCall),
{
    let mut calls = 0;
    let mut window: Option<(u32, u128)> = None; // (min, bitmap)
    for id in apic_ids {
        window = Some(match window {
            None => (id, 1),
            Some((min, bits)) => {
                // Highest ID in the window, to check a downward extension fits.
                let max = min + (127 - bits.leading_zeros());
                if id >= min && id - min < PV_IPI_BITMAP_BITS {
                    (min, bits | 1u128 << (id - min))
                } else if id < min && max - id < PV_IPI_BITMAP_BITS {
                    (id, (bits << (min - id)) | 1)
                } else {
                    emit(PvIpiCall::from_u128(bits, min));
                    calls += 1;
                    (id, 1)
                }
            }
        });
    }
    if let Some((min, bits)) = window {
        emit(PvIpiCall::from_u128(bits, min));
        calls += 1;
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(ids: &[u32]) -> ([PvIpiCall; 8], usize) {
        let mut out = [PvIpiCall::default(); 8];
        let mut n = 0;
        let calls = pv_ipi_calls(ids.iter().copied(), |c| {
            out[n] = c;
            n += 1;
        });
        assert_eq!(calls, n);
        (out, n)
    }

    /// Every ID of every call, to compare against the input set.
    fn expand(calls: &[PvIpiCall]) -> u128 {
        let mut seen = 0u128; // IDs < 128 only in these tests
        for c in calls {
            for i in 0..128u32 {
                let word = c.bitmap[(i / 64) as usize];
                if word >> (i % 64) & 1 == 1 {
                    seen |= 1 << (c.min_apic_id + i);
                }
            }
        }
        seen
    }

    #[test]
    fn empty_set_emits_nothing() {
        let (_, n) = collect(&[]);
        assert_eq!(n, 0);
    }

    #[test]
    fn single_target_is_one_bit_at_its_id() {
        let (c, n) = collect(&[5]);
        assert_eq!(n, 1);
        assert_eq!(
            c[0],
            PvIpiCall {
                bitmap: [1, 0],
                min_apic_id: 5
            }
        );
        assert_eq!(c[0].targets(), 1);
    }

    #[test]
    fn ascending_ids_share_one_window() {
        let (c, n) = collect(&[1, 2, 3, 70]);
        assert_eq!(n, 1);
        assert_eq!(c[0].min_apic_id, 1);
        assert_eq!(c[0].bitmap, [0b111, 1 << (69 - 64)]);
        assert_eq!(c[0].targets(), 4);
    }

    #[test]
    fn descending_ids_shift_the_window_down() {
        let (c, n) = collect(&[100, 40, 3]);
        assert_eq!(n, 1);
        assert_eq!(c[0].min_apic_id, 3);
        assert_eq!(expand(&c[..n]), 1 << 100 | 1 << 40 | 1 << 3);
    }

    #[test]
    fn duplicates_merge() {
        let (c, n) = collect(&[7, 7, 8]);
        assert_eq!(n, 1);
        assert_eq!(c[0].targets(), 2);
    }

    #[test]
    fn ids_beyond_128_apart_split_calls() {
        let (c, n) = collect(&[0, 127, 128, 300]);
        assert_eq!(n, 3);
        assert_eq!(
            c[0],
            PvIpiCall {
                bitmap: [1, 1 << 63],
                min_apic_id: 0
            }
        );
        assert_eq!(
            c[1],
            PvIpiCall {
                bitmap: [1, 0],
                min_apic_id: 128
            }
        );
        assert_eq!(
            c[2],
            PvIpiCall {
                bitmap: [1, 0],
                min_apic_id: 300
            }
        );
    }

    #[test]
    fn downward_extension_beyond_the_window_flushes() {
        // 200 then 10: 200 - 10 >= 128, so two calls.
        let (c, n) = collect(&[200, 10]);
        assert_eq!(n, 2);
        assert_eq!(c[0].min_apic_id, 200);
        assert_eq!(c[1].min_apic_id, 10);
    }

    #[test]
    fn all_others_of_many_vcpus_cover_the_set() {
        // vCPU 0 of 100 sends to 1..100: one window, 99 targets.
        let mut total = 0;
        let calls = pv_ipi_calls(1..100u32, |c| total += c.targets());
        assert_eq!((calls, total), (1, 99));
        // 254 vCPUs: 253 targets in two windows.
        let mut total = 0;
        let calls = pv_ipi_calls(1..254u32, |c| total += c.targets());
        assert_eq!((calls, total), (2, 253));
    }
}
