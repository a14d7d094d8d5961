//! What the lab's verdict is made of: what a pass must have left
//! ([`Expect`], an AVIC pass's [`Part`]), its lines ([`Item`]) and the
//! verdict itself ([`Report`]); below every check, so the checks of each
//! pass (verify, recorded, tap, the AVIC part's) import it and not each
//! other.
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

/// One boot of the AVIC pass (probe-avic.sh's `lab.probe=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// The KVM selftests (the peer's check of the emulation) with AVIC on, its exits traced, then
    /// with avic=0
    Selftests,
    /// ipivmm's AVIC matrix with AVIC on and with avic=0 (runs/avic-{on,off}*.json)
    Matrix,
    /// sweep --preset avic-broadcast at 2, 4 and 8 vCPUs (runs/avic-preset.json)
    Preset,
    /// sweep --preset halt-polling: the host's kvm.halt_poll_ns against --halt-poll-ns 0, KVM's
    /// polling counters per row (runs/halt-polling.json); not in the default parts
    HaltPolling,
    /// sweep --preset apicv-topology on two sockets (`--sockets 2 --smp 4`): vCPUs pinned close
    /// and spread, AVIC on and inhibited (runs/apicv-topology.json); not in the default parts
    Topology,
}

impl Part {
    /// Every part, in the order the pass boots them.
    pub const ALL: &[Part] = &[Part::Selftests, Part::Matrix, Part::Preset];

    /// Its name (`lab.probe=`, the results directory).
    pub fn name(self) -> &'static str {
        match self {
            Part::Selftests => "selftests",
            Part::Matrix => "matrix",
            Part::Preset => "preset",
            Part::HaltPolling => "halt-polling",
            Part::Topology => "topology",
        }
    }

    /// Parts only asked for by name: `halt-polling` (a boot of its own,
    /// its polling limit scaled to the emulator: docs/lab.md, "Halt
    /// polling"), `topology` a machine of its own (`--sockets 2 --smp 4`).
    pub const ON_REQUEST: &[Part] = &[Part::HaltPolling, Part::Topology];

    /// The part named `name`.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .chain(Self::ON_REQUEST)
            .copied()
            .find(|p| p.name() == name)
    }
}

/// One side of the comparison: how kvm_amd is loaded on its boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The kernel under its usual settings: Debian's 6.1 kvm_amd with
    /// `avic=1` on the lab's emulated AVIC (ICR writes to running targets
    /// accelerated: about 0 ICR-write exits per IPI).
    Base,
    /// The change under test: the same kernel with `avic=0` (every ICR
    /// write an exit: 1 per IPI).
    Changed,
}

impl Side {
    /// Its name (results directories, pass.txt).
    pub fn name(self) -> &'static str {
        match self {
            Side::Base => "base",
            Side::Changed => "changed",
        }
    }
}

/// What the verdict expects of a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The quick pass's steps.
    Quick,
    /// The full pass's steps.
    Full,
    /// `--steps`: whatever ran (a missing file fails only what ran).
    Custom,
    /// One boot of the AVIC pass (`cargo xtask lab avic`): the steps host
    /// and extra, and the AVIC checks of what that part ran.
    Avic(Part),
    /// The Linux pass (`cargo xtask lab linux`): the steps host and extra,
    /// and the Linux guest's checks.
    Linux,
    /// One boot of the crossboot pass (`cargo xtask lab crossboot`): the
    /// steps host and extra, kvm_amd as the side asks, its recordings.
    Crossboot(Side),
}

impl Expect {
    /// The expectation named `quick`, `full` or `custom`.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "quick" => Some(Expect::Quick),
            "full" => Some(Expect::Full),
            "custom" => Some(Expect::Custom),
            "linux" => Some(Expect::Linux),
            "crossboot-base" => Some(Expect::Crossboot(Side::Base)),
            "crossboot-changed" => Some(Expect::Crossboot(Side::Changed)),
            _ => Part::named(name.strip_prefix("avic-")?).map(Expect::Avic),
        }
    }

    /// Its name (pass.txt, the verdict's first line).
    pub fn name(self) -> &'static str {
        match self {
            Expect::Quick => "quick",
            Expect::Full => "full",
            Expect::Custom => "custom",
            Expect::Avic(Part::Selftests) => "avic-selftests",
            Expect::Avic(Part::Matrix) => "avic-matrix",
            Expect::Avic(Part::Preset) => "avic-preset",
            Expect::Avic(Part::HaltPolling) => "avic-halt-polling",
            Expect::Avic(Part::Topology) => "avic-topology",
            Expect::Linux => "linux",
            Expect::Crossboot(Side::Base) => "crossboot-base",
            Expect::Crossboot(Side::Changed) => "crossboot-changed",
        }
    }

    /// Whether the pass is a whole one (quick, full): everything it leaves
    /// must be there, not only what ran.
    pub(super) fn whole(self) -> bool {
        matches!(self, Expect::Quick | Expect::Full)
    }

    /// The steps (as steps.tsv names them) the pass must have run.
    pub(super) fn steps(self) -> &'static [&'static str] {
        // The full pass's, the quick pass's and one more.
        const FULL: &[&str] = &[
            "host",
            "sweep",
            "inhibit-repeats",
            "hostswitch",
            "sweep-npt0",
            "inhibit-repeats-loaded",
        ];
        match self {
            Expect::Quick => &FULL[..5],
            Expect::Full => FULL,
            Expect::Custom => &[],
            Expect::Avic(_) | Expect::Linux | Expect::Crossboot(_) => &["host", "extra"],
        }
    }

    /// The suffixes of the test outputs a pass leaves (full: again under npt=0).
    pub(super) fn test_rounds(self) -> &'static [&'static str] {
        match self {
            Expect::Full => &["", "-npt0"],
            _ => &[""],
        }
    }
}

/// One line of the verdict.
#[derive(Debug)]
pub enum Item {
    /// A check: passed or not, with what failed.
    Check {
        ok: bool,
        name: String,
        detail: Vec<String>,
    },
    /// A check this pass could not make, and why (the verdict says so;
    /// it fails nothing).
    Skip { name: String, why: String },
    /// Information (flood figures, warnings, wall times).
    Info(String),
}

/// The verdict of a pass.
#[derive(Debug, Default)]
pub struct Report {
    pub items: Vec<Item>,
    /// The guest kernel the results came from (`uname -r` there, as
    /// `ipivmm host` recorded it): the summary line names it.
    pub kernel: Option<String>,
}

impl Report {
    pub(super) fn ok(&mut self, name: impl Into<String>) {
        self.items.push(Item::Check {
            ok: true,
            name: name.into(),
            detail: Vec::new(),
        });
    }

    pub(super) fn bad(&mut self, name: impl Into<String>, detail: Vec<String>) {
        self.items.push(Item::Check {
            ok: false,
            name: name.into(),
            detail,
        });
    }

    pub(super) fn skip(&mut self, name: impl Into<String>, why: impl Into<String>) {
        self.items.push(Item::Skip {
            name: name.into(),
            why: why.into(),
        });
    }

    pub(super) fn info(&mut self, line: impl Into<String>) {
        self.items.push(Item::Info(line.into()));
    }

    pub(super) fn check(&mut self, name: &str, offences: Vec<String>) {
        if offences.is_empty() {
            self.ok(name);
        } else {
            self.bad(name, offences);
        }
    }

    /// Checks run and failed.
    pub fn counts(&self) -> (usize, usize) {
        self.items.iter().fold((0, 0), |(n, f), i| match i {
            Item::Check { ok, .. } => (n + 1, f + usize::from(!ok)),
            Item::Skip { .. } | Item::Info(_) => (n, f),
        })
    }

    /// Checks skipped.
    pub fn skipped(&self) -> usize {
        self.items
            .iter()
            .filter(|i| matches!(i, Item::Skip { .. }))
            .count()
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.counts().1 == 0
    }

    /// The names of the checks that failed.
    #[cfg(test)]
    pub fn failures(&self) -> Vec<&str> {
        self.items
            .iter()
            .filter_map(|i| match i {
                Item::Check {
                    ok: false, name, ..
                } => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The verdict as printed: `  PASS  name`, `  FAIL  name` with up to 20
    /// lines of detail, `  SKIP  name: why`, the information lines, and the
    /// summary.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for i in &self.items {
            match i {
                Item::Check { ok, name, detail } => {
                    let _ = writeln!(s, "  {}  {name}", if *ok { "PASS" } else { "FAIL" });
                    for d in detail.iter().take(20) {
                        let _ = writeln!(s, "        {d}");
                    }
                    if detail.len() > 20 {
                        let _ = writeln!(s, "        ... {} more", detail.len() - 20);
                    }
                }
                Item::Skip { name, why } => {
                    let _ = writeln!(s, "  SKIP  {name}: {why}");
                }
                Item::Info(line) => {
                    let _ = writeln!(s, "{line}");
                }
            }
        }
        let (n, failed) = self.counts();
        let _ = write!(s, "lab: {}/{n} checks passed", n - failed);

        if failed > 0 {
            let _ = write!(s, ", {failed} FAILED");
        }
        match self.skipped() {
            0 => {}
            k => {
                let _ = write!(s, ", {k} skipped");
            }
        }
        let _ = write!(
            s,
            "; guest kernel {}",
            self.kernel.as_deref().unwrap_or("unknown (no host.json)")
        );
        s.push('\n');
        s
    }
}

/// What `ipivmm host --json` wrote in `dir/file` (host.json; the AVIC
/// pass's host-avic.json) at `path` (`/backend`; under `/host` or, as
/// older trees have it, at the top).
pub(super) fn host_fact(dir: &Path, file: &str, path: &str) -> Option<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join(file)).ok()?).ok()?;
    v.pointer(&format!("/host{path}"))
        .or_else(|| v.pointer(path))
        .cloned()
}
