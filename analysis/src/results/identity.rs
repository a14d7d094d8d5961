//! What a configuration *is*: one typed value with equality, order and a
//! stable serialized form, the key that repeats, sweep rows, baselines,
//! expectations' scopes and `compare` line up by. Labels
//! ([`crate::results::RunReport::label`]) are made from it for people to
//! read and are never parsed back.
//!
//! A configuration is what changes what is measured: the guest workload
//! and how its targets wait, the vCPUs, the mode's four parts, the
//! levers (exits turned off, halt polling, the realtime hint, pinning),
//! the named placement, the host setting of a `--host-param` stage and
//! the workload's parameters. How long it is measured (iterations,
//! warm-up, memory), which phase is read, and an injected delay
//! (`--inject-delay-cycles`, a known effect applied *to* a configuration
//! to check a comparison) are not part of it.
use crate::mode::{
    ApicMode, ApicvRequest, IpiPath, Irqchip, Lever, Levers, Mode, TargetWait, Workload,
};
use crate::results::{RunConfig, RunReport};
use serde::{Deserialize, Serialize};

/// What the guest runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Guest {
    /// A workload of the built-in payload.
    Builtin(Workload),
    /// A custom payload, by its file name (without directories).
    Payload(String),
}

impl Guest {
    /// Its name: the workload's, or the payload's file name.
    pub fn name(&self) -> &str {
        match self {
            Guest::Builtin(w) => w.name(),
            Guest::Payload(p) => p,
        }
    }
}

/// One part of a configuration: what a scope (`apic=x2apic`) or a
/// comparison's dimension (`--by apic`) names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// The built-in workload or payload (`workload=broadcast`).
    Workload,
    /// How targets wait (`target=halt`).
    Target,
    /// vCPUs (`vcpus=4`).
    Vcpus,
    /// Interrupt controller (`irqchip=kernel`).
    Irqchip,
    /// Guest APIC mode (`apic=x2apic`).
    Apic,
    /// IPI path (`ipi=pv`).
    Ipi,
    /// The APICv request (`apicv=inhibit`); a scope may also name the
    /// state the run observed (`apicv=active`, docs/ci.md).
    Apicv,
    /// A lever (`exits=hlt+pause`, `poll=host`, `rt=yes`, `pin=0,1`...:
    /// [`crate::mode::lever_table`]).
    Lever(Lever),
    /// Named placement (`placement=close`).
    Placement,
    /// A `--host-param` stage's setting (`host-param=kvm_amd.avic=1`).
    HostParam,
}

/// The fields before the levers, which every key names.
const HEAD: [Field; 7] = [
    Field::Workload,
    Field::Target,
    Field::Vcpus,
    Field::Irqchip,
    Field::Apic,
    Field::Ipi,
    Field::Apicv,
];

/// `head`, every lever, then `tail`, as one array (the lists below).
const fn with_levers<const N: usize>(head: &[Field], tail: &[Field]) -> [Field; N] {
    let mut all = [Field::Workload; N];
    let mut i = 0;
    while i < head.len() {
        all[i] = head[i];
        i += 1;
    }
    let mut l = 0;
    while l < Lever::COUNT {
        all[i] = Field::Lever(Lever::ALL[l]);
        i += 1;
        l += 1;
    }
    let mut t = 0;
    while t < tail.len() {
        all[i] = tail[t];
        i += 1;
        t += 1;
    }
    assert!(i == N, "the list's length is head + levers + tail");
    all
}

impl Field {
    /// Every field, in the identity's order.
    pub const ALL: [Field; 9 + Lever::COUNT] =
        with_levers(&HEAD, &[Field::Placement, Field::HostParam]);

    /// The fields a mode label shows (the parts and levers, placement and
    /// host setting): what `compare --by mode` takes as its columns.
    pub const MODE: [Field; 6 + Lever::COUNT] = with_levers(
        &[Field::Irqchip, Field::Apic, Field::Ipi, Field::Apicv],
        &[Field::Placement, Field::HostParam],
    );

    /// The field of each lever, in the table's order.
    pub const LEVERS: [Field; Lever::COUNT] = with_levers(&[], &[]);

    /// Its name in scopes, keys and `compare --by` (`host-param`).
    pub fn name(self) -> &'static str {
        match self {
            Field::Workload => "workload",
            Field::Target => "target",
            Field::Vcpus => "vcpus",
            Field::Irqchip => "irqchip",
            Field::Apic => "apic",
            Field::Ipi => "ipi",
            Field::Apicv => "apicv",
            Field::Lever(l) => l.name(),
            Field::Placement => "placement",
            Field::HostParam => "host-param",
        }
    }
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Field {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Field::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("no field '{s}'"))
    }
}

/// A configuration.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConfigId {
    /// What the guest runs.
    pub guest: Guest,
    /// How targets wait.
    pub target: TargetWait,
    /// vCPUs.
    pub vcpus: usize,
    /// Interrupt controller.
    pub irqchip: Irqchip,
    /// Guest APIC mode.
    pub apic: ApicMode,
    /// IPI path.
    pub ipi: IpiPath,
    /// APICv request.
    pub apicv: ApicvRequest,
    /// The levers that are set.
    #[serde(flatten)]
    pub levers: Levers,
    /// Named placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// A `--host-param` stage's setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_param: Option<String>,
    /// `BootInfo::params` (the multicast's target set), when any is set.
    #[serde(default, skip_serializing_if = "is_zero_params")]
    pub params: [u64; 8],
}

fn is_zero_params(p: &[u64; 8]) -> bool {
    p.iter().all(|v| *v == 0)
}

impl ConfigId {
    /// The configuration `r` ran.
    pub fn of(r: &RunReport) -> Self {
        Self::from_parts(
            &r.mode,
            r.apicv.requested,
            r.placement.clone(),
            r.host_param.clone(),
        )
    }

    /// The configuration of a run of `m` with APICv request `apicv`, a
    /// named placement and a host setting.
    pub fn from_parts(
        m: &RunConfig,
        apicv: ApicvRequest,
        placement: Option<String>,
        host_param: Option<String>,
    ) -> Self {
        Self {
            guest: match &m.payload {
                None => Guest::Builtin(m.workload),
                Some(_) => Guest::Payload(m.workload_label()),
            },
            target: m.target,
            vcpus: m.vcpus,
            irqchip: m.irqchip,
            apic: m.apic,
            ipi: m.ipi,
            apicv,
            levers: m.levers.clone(),
            placement,
            host_param,
            params: m.params,
        }
    }

    /// Its mode's four parts.
    pub fn mode(&self) -> Mode {
        Mode {
            irqchip: self.irqchip,
            apic: self.apic,
            ipi: self.ipi,
            apicv: self.apicv,
        }
    }

    /// The value of `f`, as a scope or a column spells it.
    pub fn value(&self, f: Field) -> String {
        match f {
            Field::Workload => self.guest.name().to_string(),
            Field::Target => self.target.name().to_string(),
            Field::Vcpus => self.vcpus.to_string(),
            Field::Irqchip => self.irqchip.name().to_string(),
            Field::Apic => self.apic.name().to_string(),
            Field::Ipi => self.ipi.name().to_string(),
            Field::Apicv => self.apicv.name().to_string(),
            Field::Lever(l) => self.levers.value(l),
            Field::Placement => self.placement.clone().unwrap_or_else(|| "none".into()),
            Field::HostParam => self.host_param.clone().unwrap_or_else(|| "none".into()),
        }
    }

    /// Whether `f` shows in the key: the fields before the levers always,
    /// a lever, the placement and the host setting when set.
    pub fn is_set(&self, f: Field) -> bool {
        match f {
            Field::Lever(l) => self.levers.is_set(l),
            Field::Placement => self.placement.is_some(),
            Field::HostParam => self.host_param.is_some(),
            _ => true,
        }
    }

    /// This configuration with `fields` set to one value every
    /// configuration shares: the key of a row whose columns differ in
    /// those fields (`compare --by`).
    pub fn without(&self, fields: &[Field]) -> Self {
        let mut c = self.clone();
        for f in fields {
            match f {
                Field::Workload => c.guest = Guest::Payload(String::new()),
                Field::Target => c.target = TargetWait::Spin,
                Field::Vcpus => c.vcpus = 0,
                Field::Irqchip => c.irqchip = Irqchip::Kernel,
                Field::Apic => c.apic = ApicMode::Xapic,
                Field::Ipi => c.ipi = IpiPath::Icr,
                Field::Apicv => c.apicv = ApicvRequest::Host,
                Field::Lever(l) => c.levers.reset(*l),
                Field::Placement => c.placement = None,
                Field::HostParam => c.host_param = None,
            }
        }
        c
    }

    /// The mode label: `irqchip/apic/ipi`, ` apicv-inhibit`, the levers
    /// that differ from the defaults, the placement and the host setting
    /// (docs/modes.md, "Labels").
    pub fn label(&self) -> String {
        let mut l = self.mode().label();
        let mut push = |s: String| {
            l.push(' ');
            l.push_str(&s);
        };
        for part in self.levers.label_parts() {
            push(part);
        }
        for extra in [&self.placement, &self.host_param].into_iter().flatten() {
            push(extra.clone());
        }
        l
    }

    /// The workload as rows show it: `pingpong, target halt`, or
    /// `payload NAME`.
    pub fn workload_label(&self) -> String {
        match &self.guest {
            Guest::Builtin(w) => format!("{}, target {}", w.name(), self.target.name()),
            Guest::Payload(p) => format!("payload {p}"),
        }
    }

    /// One line naming every field: the stable text form (CSV, messages),
    /// e.g. `workload=pingpong target=halt vcpus=2 irqchip=kernel
    /// apic=x2apic ipi=icr apicv=host`, then any lever that is set.
    pub fn key(&self) -> String {
        let mut parts: Vec<String> = Field::ALL
            .into_iter()
            .filter(|f| self.is_set(*f))
            .map(|f| format!("{f}={}", self.value(f)))
            .collect();
        if !is_zero_params(&self.params) {
            let p: Vec<String> = self.params.iter().map(|v| format!("{v:#x}")).collect();
            parts.push(format!("params={}", p.join(",")));
        }
        parts.join(" ")
    }
}

impl std::fmt::Display for ConfigId {
    /// `pingpong, target halt, 2 vCPUs / kernel/x2apic/icr`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = if self.vcpus == 1 { "" } else { "s" };
        write!(
            f,
            "{}, {} vCPU{s} / {}",
            self.workload_label(),
            self.vcpus,
            self.label()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(c: &RunConfig) -> ConfigId {
        let doc = crate::results::Document::from_json(
            include_str!("../../tests/fixtures/run-pingpong-2026-12-01.json"),
            "example",
        )
        .unwrap();
        let mut r = doc.runs[0].clone();
        r.mode = c.clone();
        r.apicv.requested = ApicvRequest::Host;
        ConfigId::of(&r)
    }

    #[test]
    fn labels_come_from_the_identity_and_agree_with_the_run_label() {
        let c = RunConfig {
            apic: ApicMode::X2apic,
            levers: Levers {
                halt_poll_ns: Some(0),
                pin: vec![0, 1],
                ..Levers::default()
            },
            ..RunConfig::default()
        };
        let i = id(&c);
        assert_eq!(i.label(), "kernel/x2apic/icr poll:0 pin:0,1");
        assert_eq!(
            i.key(),
            "workload=pingpong target=spin vcpus=2 irqchip=kernel apic=x2apic ipi=icr apicv=host poll=0 pin=0,1"
        );
        assert_eq!(
            i.to_string(),
            "pingpong, target spin, 2 vCPUs / kernel/x2apic/icr poll:0 pin:0,1"
        );
    }

    #[test]
    fn what_is_not_the_configuration_does_not_change_it() {
        let base = RunConfig::default();
        let longer = RunConfig {
            iterations: 7,
            warmup: 3,
            ipi_delay_cycles: 120_000,
            phase: Some("cpuid".into()),
            ..RunConfig::default()
        };
        assert_eq!(id(&base), id(&longer));
        let other = RunConfig {
            vcpus: 4,
            ..RunConfig::default()
        };
        assert_ne!(id(&base), id(&other));
        assert!(id(&base) < id(&other), "ordered by field");
    }

    #[test]
    fn without_a_field_rows_line_up_and_the_form_round_trips() {
        let a = id(&RunConfig::default());
        let b = id(&RunConfig {
            apic: ApicMode::X2apic,
            ..RunConfig::default()
        });
        assert_ne!(a, b);
        assert_eq!(a.without(&[Field::Apic]), b.without(&[Field::Apic]));
        assert_ne!(a.without(&[Field::Ipi]), b.without(&[Field::Ipi]));
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(serde_json::from_str::<ConfigId>(&json).unwrap(), b);
        assert!(json.contains("\"apic\":\"x2apic\""), "{json}");
        for f in Field::ALL {
            assert_eq!(f.to_string().parse::<Field>().unwrap(), f);
        }
    }
}
