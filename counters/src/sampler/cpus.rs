//! The host's online CPUs, for events opened once per CPU.

use std::io;

/// Where the kernel lists the online CPUs (`0-3,8`).
const ONLINE: &str = "/sys/devices/system/cpu/online";

/// The CPUs online now (a CPU brought online later is not in the list).
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let text = std::fs::read_to_string(ONLINE)?;
    parse_cpu_list(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{ONLINE}: not a CPU list: {:?}", text.trim()),
        )
    })
}

/// `0-3,8` → `[0, 1, 2, 3, 8]`; None when malformed or empty.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let num = |t: &str| t.trim().parse::<u32>().ok();
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                // The kernel has at most 8192 CPUs (NR_CPUS).
                if a > b || b >= 8192 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_as_the_kernel_prints_them() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        for bad in ["", "\n", "a", "3-1", "0-", "0,,1", "0-99999"] {
            assert_eq!(parse_cpu_list(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn every_cpu_this_process_may_use_is_online() {
        let cpus = online_cpus().expect("sysfs lists the online CPUs");
        let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(cpus.len() >= usable, "{cpus:?} online, {usable} usable");
    }
}
