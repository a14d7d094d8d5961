//! Under a Linux workload's sweep table, the guest's own cross-check of
//! each row: the IPIs each target's kernel counted in the measured phase
//! (its `/proc/interrupts` CAL, the `linux_cal` record), against the
//! operations vCPU 0's workload sent (its `operations` record), over the
//! row's completed repeats (docs/linux-guest.md).
use ipivmm_analysis::results::summary::RunSummary;
use ipivmm_analysis::results::RunReport;

/// One row's cross-check: ranges over its targets and repeats.
#[derive(Debug, PartialEq, Eq)]
pub struct CalCheck {
    /// The fewest and most CAL a target counted.
    pub cal: (u64, u64),
    /// The fewest and most operations vCPU 0 sent.
    pub operations: (u64, u64),
    /// The runs it covers.
    pub runs: usize,
}

impl CalCheck {
    /// Of the completed runs among `members` that recorded both counts in
    /// their measured phase; None when none did (not a Linux row).
    pub fn of(members: &[&(&RunReport, RunSummary)]) -> Option<Self> {
        let (mut cal, mut ops, mut runs) = (Vec::new(), Vec::new(), 0);
        for (r, s) in members {
            let Some(phase) = s.phase.as_deref().filter(|_| r.succeeded()) else {
                continue;
            };
            let record = |v: &ipivmm_analysis::results::VcpuResult, k: &str| {
                v.phase_named(phase).and_then(|p| p.records.get(k).copied())
            };
            let Some(sent) = r.vcpus.first().and_then(|v| record(v, "operations")) else {
                continue;
            };
            let counted: Vec<u64> = r
                .vcpus
                .iter()
                .skip(1)
                .filter_map(|v| record(v, "linux_cal"))
                .collect();
            if counted.is_empty() {
                continue;
            }
            ops.push(sent);
            cal.extend(counted);
            runs += 1;
        }
        let range = |v: &[u64]| Some((*v.iter().min()?, *v.iter().max()?));
        Some(Self {
            cal: range(&cal)?,
            operations: range(&ops)?,
            runs,
        })
    }

    /// `CAL 50–51 per target for 50 operations (2 runs)`.
    pub fn text(&self) -> String {
        let range = |(a, b): (u64, u64)| match a == b {
            true => a.to_string(),
            false => format!("{a}–{b}"),
        };
        format!(
            "CAL {} per target for {} operations ({} run{})",
            range(self.cal),
            range(self.operations),
            self.runs,
            if self.runs == 1 { "" } else { "s" }
        )
    }
}

/// The lines under a table: a heading and one line per row that has a
/// cross-check (`rows`: each row's label and its runs), or nothing.
pub fn lines(rows: &[(String, Vec<&(&RunReport, RunSummary)>)]) -> String {
    let checked: Vec<String> = rows
        .iter()
        .filter_map(|(label, members)| {
            CalCheck::of(members).map(|c| format!("    {label}: {}\n", c.text()))
        })
        .collect();
    if checked.is_empty() {
        return String::new();
    }
    format!(
        "  guest cross-check (each target's /proc/interrupts CAL in the measured phase, against the operations vCPU 0 sent):\n{}",
        checked.concat()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real Linux run of the lab (4 vCPUs, 50 broadcasts): every
    /// target's CAL against vCPU 0's operations; a payload run has none.
    #[test]
    fn a_linux_rows_cross_check_is_its_targets_cal_against_the_operations() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../xtask/fixtures/linux/linux-broadcast-x2apic-4-host.json"
        );
        let doc = ipivmm_analysis::results::Document::load(std::path::Path::new(path)).unwrap();
        let r = &doc.runs[0];
        let member = (r, r.summary());
        let check = CalCheck::of(&[&member]).expect("a Linux run");
        assert_eq!(
            check,
            CalCheck {
                cal: (50, 51),
                operations: (50, 50),
                runs: 1
            }
        );
        assert_eq!(
            check.text(),
            "CAL 50–51 per target for 50 operations (1 run)"
        );
        let text = lines(&[("linux:ipi-broadcast 4v".into(), vec![&member])]);
        assert!(
            text.contains("    linux:ipi-broadcast 4v: CAL 50–51"),
            "{text}"
        );
        // The measured phase without the guest's records: no line.
        let mut bare = r.clone();
        for v in &mut bare.vcpus {
            for p in &mut v.phases {
                p.records.clear();
            }
        }
        let member = (&bare, bare.summary());
        assert_eq!(CalCheck::of(&[&member]), None);
        assert_eq!(lines(&[("x".into(), vec![&member])]), "");
    }
}
