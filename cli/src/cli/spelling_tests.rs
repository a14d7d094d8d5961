//! The mode parts' spelling on the command line: clap's (the engine's
//! `clap` feature, which this crate turns on) is the one `name()` gives,
//! which serde writes and strum parses (checked in the engine's own tests).
use clap::ValueEnum;
use ipivmm_analysis::mode::levers::ExitControl;
use ipivmm_analysis::mode::ExitReasons;
use ipivmm_analysis::mode::{ApicMode, ApicvRequest, IpiPath, Irqchip, TargetWait, Workload};

/// Every value of `all` parses from its `name()`, and clap offers exactly
/// those names, in declaration order.
fn clap_spells<T: ValueEnum + Copy + PartialEq + std::fmt::Debug>(
    all: &[T],
    name: impl Fn(T) -> &'static str,
) {
    for v in all {
        let n = name(*v);
        assert_eq!(T::from_str(n, false).ok(), Some(*v), "{n}");
    }
    let offered: Vec<String> = T::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value())
        .map(|p| p.get_name().to_string())
        .collect();
    let names: Vec<String> = all.iter().map(|v| name(*v).to_string()).collect();
    assert_eq!(offered, names);
}

#[test]
fn clap_spells_every_mode_part_as_its_name() {
    clap_spells(Workload::ALL, Workload::name);
    clap_spells(ApicMode::ALL, ApicMode::name);
    clap_spells(IpiPath::ALL, IpiPath::name);
    clap_spells(TargetWait::ALL, TargetWait::name);
    clap_spells(Irqchip::ALL, Irqchip::name);
    clap_spells(ApicvRequest::ALL, ApicvRequest::name);
    clap_spells(ExitControl::ALL, ExitControl::name);
    clap_spells(ExitReasons::ALL, ExitReasons::name);
    // compare --by: the mode's parts and one dimension per lever.
    clap_spells(
        &ipivmm_analysis::compare::Dimension::ALL,
        ipivmm_analysis::compare::Dimension::name,
    );
    assert!(Irqchip::from_str("no-such-chip", false).is_err());
}
