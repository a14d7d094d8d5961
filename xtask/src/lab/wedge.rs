//! A wedged guest's CPU state, named: every `RIP=` of a register dump looked
//! up in the guest's own kallsyms (saved at boot by init.sh: Debian's
//! System.map is a stub; the guest boots nokaslr), the named lines first.
use std::collections::BTreeMap;

/// Text symbols by address, from `/proc/kallsyms` lines (`addr type name [module]`).
pub struct Symbols(Vec<(u64, String)>);

impl Symbols {
    /// Parses kallsyms text; unreadable lines are skipped.
    pub fn parse(text: &str) -> Self {
        let mut v: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() < 3 {
                    return None;
                }
                let addr = u64::from_str_radix(f[0], 16).ok()?;
                let name = match f.get(3) {
                    Some(module) => format!("{} {module}", f[2]),
                    None => f[2].to_string(),
                };
                Some((addr, name))
            })
            .collect();
        v.sort();
        Self(v)
    }

    /// `symbol+0xoffset` of `addr`, or `?` when no symbol is within 1 MiB below it.
    pub fn name(&self, addr: u64) -> String {
        let i = self.0.partition_point(|(a, _)| *a <= addr);
        match i.checked_sub(1).map(|i| &self.0[i]) {
            Some((a, n)) if addr - a < 1 << 20 => format!("{n}+{:#x}", addr - a),
            _ => "?".into(),
        }
    }
}

/// Every `RIP=<16 hex digits>` of a register dump.
pub fn rips(dump: &str) -> Vec<u64> {
    dump.match_indices("RIP=")
        .filter_map(|(i, _)| {
            let hex = dump.get(i + 4..i + 20)?;
            hex.bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                .then(|| u64::from_str_radix(hex, 16).ok())?
        })
        .collect()
}

/// The dump with one `RIP <addr> = <symbol>` line per CPU before it.
pub fn symbolize(dump: &str, syms: &Symbols) -> String {
    let named: Vec<String> = rips(dump)
        .into_iter()
        .map(|r| format!("RIP {r:016x} = {}", syms.name(r)))
        .collect();
    format!("{}\n\n{dump}", named.join("\n"))
}

/// Where the CPUs were, for the log: `2 RIP ... = __schedule+0x2ab;...`.
pub fn summary(dump: &str, syms: &Symbols) -> String {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for r in rips(dump) {
        *count
            .entry(format!("RIP {r:016x} = {}", syms.name(r)))
            .or_default() += 1;
    }
    let parts: Vec<String> = count.into_iter().map(|(k, n)| format!("{n} {k}")).collect();
    parts.join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rips_are_named_from_kallsyms() {
        let syms = Symbols::parse(
            "ffffffff81000000 T _stext\nffffffff81a00000 T __schedule\nffffffffc0100000 t svm_vcpu_run [kvm_amd]\nbad line\n",
        );
        assert_eq!(syms.name(0xffffffff81a002ab), "__schedule+0x2ab");
        assert_eq!(syms.name(0xffffffffc0100010), "svm_vcpu_run [kvm_amd]+0x10");
        assert_eq!(syms.name(0x1000), "?");
        let dump =
            "CPU#0\nRAX=0 RIP=ffffffff81a002ab RFL=00000046\nCPU#1\nRIP=ffffffff81a002ab\nRIP=12\n";
        assert_eq!(rips(dump), [0xffffffff81a002ab, 0xffffffff81a002ab]);
        let s = symbolize(dump, &syms);
        assert!(
            s.starts_with("RIP ffffffff81a002ab = __schedule+0x2ab\nRIP ffffffff81a002ab"),
            "{s}"
        );
        assert!(s.ends_with(dump));
        assert_eq!(
            summary(dump, &syms),
            "2 RIP ffffffff81a002ab = __schedule+0x2ab"
        );
    }
}
