//! Host CPU topology from sysfs, to place vCPUs close together or spread
//! apart (the `apicv-topology` preset).
use std::path::Path;

/// One online host CPU and where it sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuPlace {
    /// Logical CPU number.
    pub cpu: usize,
    /// Socket (physical_package_id).
    pub package: i64,
    /// Core within the socket.
    pub core: i64,
}

/// Read the places of `cpus` from `root` (normally /sys/devices/system/cpu).
pub fn read_places(root: &Path, cpus: &[usize]) -> Vec<CpuPlace> {
    let read = |cpu: usize, f: &str| -> i64 {
        std::fs::read_to_string(root.join(format!("cpu{cpu}/topology/{f}")))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    cpus.iter()
        .map(|&cpu| CpuPlace {
            cpu,
            package: read(cpu, "physical_package_id"),
            core: read(cpu, "core_id"),
        })
        .collect()
}

/// `n` CPUs packed together: same socket first, SMT siblings adjacent.
pub fn close_together(places: &[CpuPlace], n: usize) -> Vec<usize> {
    let mut p = places.to_vec();
    p.sort_by_key(|c| (c.package, c.core, c.cpu));
    p.iter().take(n).map(|c| c.cpu).collect()
}

/// `n` CPUs spread out: round-robin over sockets, then over cores, so
/// neighbours in the list are as far apart as the host allows.
pub fn spread_apart(places: &[CpuPlace], n: usize) -> Vec<usize> {
    let mut packages: Vec<i64> = places.iter().map(|c| c.package).collect();
    packages.sort_unstable();
    packages.dedup();
    // Per socket: one CPU per core first, SMT siblings last.
    let mut queues: Vec<Vec<usize>> = packages
        .iter()
        .map(|&pkg| {
            let mut cpus: Vec<&CpuPlace> = places.iter().filter(|c| c.package == pkg).collect();
            cpus.sort_by_key(|c| (c.cpu, c.core));
            let mut seen = Vec::new();
            let (mut first, mut rest) = (Vec::new(), Vec::new());
            for c in cpus {
                if seen.contains(&c.core) {
                    rest.push(c.cpu);
                } else {
                    seen.push(c.core);
                    first.push(c.cpu);
                }
            }
            first.extend(rest);
            first.reverse();
            first
        })
        .collect();
    let mut out = Vec::new();
    while out.len() < n && queues.iter().any(|q| !q.is_empty()) {
        for q in queues.iter_mut() {
            if let Some(c) = q.pop() {
                if out.len() < n {
                    out.push(c);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_sockets() -> Vec<CpuPlace> {
        // 2 sockets x 2 cores x 2 threads; Linux numbering: siblings are n and n+4.
        (0..8)
            .map(|cpu| CpuPlace {
                cpu,
                package: ((cpu % 4) / 2) as i64,
                core: (cpu % 2) as i64,
            })
            .collect()
    }

    #[test]
    fn close_packs_one_socket() {
        let c = close_together(&two_sockets(), 2);
        let p = two_sockets();
        assert_eq!(p[c[0]].package, p[c[1]].package);
    }

    #[test]
    fn spread_alternates_sockets_then_cores() {
        let p = two_sockets();
        let s = spread_apart(&p, 4);
        assert_eq!(s.len(), 4);
        assert_ne!(p[s[0]].package, p[s[1]].package);
        // The first two on the same socket are different cores.
        assert_ne!(p[s[0]].core, p[s[2]].core);
    }

    #[test]
    fn one_socket_host_gives_the_same_cpus_both_ways() {
        let p: Vec<CpuPlace> = (0..2)
            .map(|cpu| CpuPlace {
                cpu,
                package: 0,
                core: cpu as i64,
            })
            .collect();
        let mut a = close_together(&p, 2);
        let mut b = spread_apart(&p, 2);
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }
}
