//! The console lines that end a multiboot test kernel's tests (KVM-free):
//! kvm-unit-tests' `vmexit` prints `NAME CYCLES` after each test it ran
//! (`ipi 123296`, `cpuid 80`), then perhaps `  ipi NAME N` and
//! `  eoi NAME N` (its IPI's and EOI's share). [`classify`] holds the rule
//! (docs/kvm-unit-tests.md, "Phases per test"); [`TestNames`] turns test
//! names into distinct phase names. The vCPU side, which ends the phases,
//! is `vcpu::console_marks`.

/// Longest test name taken (kvm-unit-tests' longest is 27 bytes); with a
/// repeat's `#N` it stays within a phase name's [`ipivmm_abi::MAX_NAME_LEN`].
pub const MAX_TEST_NAME: usize = 48;
/// Most digits of a test's figure (`u64::MAX` has 20).
const MAX_DIGITS: usize = 20;
/// Longest word of a figure line (`ipi`, `eoi`).
const MAX_WORD: usize = 16;
/// The record a test's own figure goes in (kvm-unit-tests' `vmexit`: TSC
/// cycles per iteration).
pub const FIGURE_RECORD: &str = "cycles";
/// The phase before the first test's (its kernel's boot).
pub const BOOT_PHASE: &str = "boot";
/// The phase after the last test's line, to the exit port.
pub const REST_PHASE: &str = "rest";
/// The one phase of a kernel that printed no test line (the whole run).
pub const RUN_PHASE: &str = "run";

/// What one complete console line is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// `NAME N`: test NAME ended; its figure N when it is a u64 (a
    /// negative one, kvm-unit-tests' `(int)` cast overflowing, is none).
    Test {
        /// The test's name as printed.
        name: &'a str,
        /// Its figure.
        figure: Option<u64>,
    },
    /// `  WORD NAME N`, NAME the last test's: another figure of it, kept
    /// as the record `WORD_cycles`.
    Figure {
        /// The record's name.
        record: String,
        /// Its value.
        value: u64,
    },
    /// Anything else: the kernel's other output.
    Other,
}

/// The rule: a test line is exactly a name, one space and a decimal
/// number: the name 1 to [`MAX_TEST_NAME`] bytes of ASCII letters, digits,
/// `_` and `-`, starting with a letter or `_`; the number an optional `-`
/// and 1 to 20 digits. Nothing else on the line (no leading space, none
/// trailing). A figure line is two spaces, a word of lowercase letters,
/// the last test's name and a number of 1 to 20 digits.
pub fn classify<'a>(line: &'a str, last_test: Option<&str>) -> Line<'a> {
    if let Some(rest) = line.strip_prefix("  ") {
        return figure_line(rest, last_test);
    }
    let Some((name, number)) = line.split_once(' ') else {
        return Line::Other;
    };
    let digits = number.strip_prefix('-').unwrap_or(number);
    if !is_test_name(name) || !is_digits(digits) {
        return Line::Other;
    }
    Line::Test {
        name,
        figure: number.parse().ok(),
    }
}

/// `WORD NAME N` after the two spaces.
fn figure_line(rest: &str, last_test: Option<&str>) -> Line<'static> {
    let mut words = rest.split(' ');
    let (Some(word), Some(name), Some(number), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Line::Other;
    };
    let word_ok =
        (1..=MAX_WORD).contains(&word.len()) && word.bytes().all(|b| b.is_ascii_lowercase());
    match (
        word_ok && Some(name) == last_test && is_digits(number),
        number.parse(),
    ) {
        (true, Ok(value)) => Line::Figure {
            record: format!("{word}_{FIGURE_RECORD}"),
            value,
        },
        _ => Line::Other,
    }
}

/// A test's name by the rule of [`classify`].
pub fn is_test_name(name: &str) -> bool {
    let b = name.as_bytes();
    (1..=MAX_TEST_NAME).contains(&b.len())
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

fn is_digits(s: &str) -> bool {
    (1..=MAX_DIGITS).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
}

/// Distinct phase names for the tests of a run: a test's name the first
/// time, `NAME#2`, `NAME#3`... when it ends again (kvm-unit-tests'
/// `pci-mem` repeats; each run of a test keeps its own phase and figure,
/// none is merged). The names of ipivmm's own phases ([`BOOT_PHASE`],
/// [`REST_PHASE`], [`RUN_PHASE`]) count as taken: a test called `boot`
/// is `boot#2`.
#[derive(Clone, Debug)]
pub struct TestNames {
    seen: std::collections::BTreeMap<String, u32>,
}

impl Default for TestNames {
    fn default() -> Self {
        let seen = [BOOT_PHASE, REST_PHASE, RUN_PHASE]
            .into_iter()
            .map(|n| (n.to_string(), 1))
            .collect();
        Self { seen }
    }
}

impl TestNames {
    /// The phase name of test `name` (by [`is_test_name`]) ending now.
    pub fn phase_name(&mut self, name: &str) -> String {
        let n = self.seen.entry(name.to_string()).or_insert(0);
        *n += 1;
        match *n {
            1 => name.to_string(),
            n => format!("{name}#{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test(name: &str, figure: Option<u64>) -> Line<'_> {
        Line::Test { name, figure }
    }

    #[test]
    fn kvm_unit_tests_vmexit_lines_are_tests_and_its_boot_lines_are_not() {
        assert_eq!(classify("ipi 123296", None), test("ipi", Some(123_296)));
        assert_eq!(classify("cpuid 80", None), test("cpuid", Some(80)));
        assert_eq!(
            classify("x2apic_self_ipi_tpr_sti_hlt 4021", None),
            test("x2apic_self_ipi_tpr_sti_hlt", Some(4021))
        );
        assert_eq!(classify("pci-mem 1", None), test("pci-mem", Some(1)));
        // An overflowing (int) figure: still a test's end, no figure.
        assert_eq!(classify("vmcall -5", None), test("vmcall", None));
        for boot in [
            "enabling apic",
            "smp: waiting for 1 APs",
            "setup: CPU 1 online",
            "paging enabled",
            "cr0 = 80010011",
            "cr3 = 104d000",
            "cr4 = 20",
            "ipi (skipped)",
            "PASS: x 1",
            "",
        ] {
            assert_eq!(classify(boot, None), Line::Other, "{boot:?}");
        }
    }

    #[test]
    fn the_rule_is_exact_about_names_numbers_and_spaces() {
        for other in [
            "ipi  5",
            " ipi 5",
            "ipi 5 ",
            "ipi 5x",
            "ipi 0x10",
            "ipi -",
            "ipi --5",
            "1ipi 5",
            "-ipi 5",
            "ipi.x 5",
            "ipi#2 5",
            "ipi\t5",
            "ïpi 5",
            "ipi 123456789012345678901",
        ] {
            assert_eq!(classify(other, None), Line::Other, "{other:?}");
        }
        let longest = "n".repeat(MAX_TEST_NAME);
        assert_eq!(
            classify(&format!("{longest} 1"), None),
            test(&longest, Some(1))
        );
        let longer = format!("{longest}n 1");
        assert_eq!(classify(&longer, None), Line::Other);
        assert_eq!(classify("_t 0", None), test("_t", Some(0)));
        // 20 digits past u64::MAX: a test, no figure.
        assert_eq!(classify("t 99999999999999999999", None), test("t", None));
    }

    #[test]
    fn figure_lines_belong_to_the_last_test_only() {
        let ipi = Some("ipi");
        assert_eq!(
            classify("  ipi ipi 579658", ipi),
            Line::Figure {
                record: "ipi_cycles".into(),
                value: 579_658
            }
        );
        assert_eq!(
            classify("  eoi ipi 7", ipi),
            Line::Figure {
                record: "eoi_cycles".into(),
                value: 7
            }
        );
        for other in [
            "  ipi cpuid 5",
            "  ipi ipi -5",
            "  IPI ipi 5",
            "  ipi ipi 5 x",
            "   ipi ipi 5",
            "  ipi ipi",
        ] {
            assert_eq!(classify(other, ipi), Line::Other, "{other:?}");
        }
        assert_eq!(classify("  ipi ipi 5", None), Line::Other);
    }

    #[test]
    fn a_repeated_test_gets_a_suffix_and_ipivmms_names_are_taken() {
        let mut n = TestNames::default();
        assert_eq!(n.phase_name("pci-mem"), "pci-mem");
        assert_eq!(n.phase_name("ipi"), "ipi");
        assert_eq!(n.phase_name("pci-mem"), "pci-mem#2");
        assert_eq!(n.phase_name("pci-mem"), "pci-mem#3");
        assert_eq!(n.phase_name("boot"), "boot#2");
        assert_eq!(n.phase_name("rest"), "rest#2");
        assert_eq!(n.phase_name("run"), "run#2");
        let long = "n".repeat(MAX_TEST_NAME);
        n.phase_name(&long);
        let again = n.phase_name(&long);
        assert!(
            ipivmm_analysis::results::PhaseResult::is_name(&again),
            "{again}"
        );
    }
}
