//! Looking at data as it comes without raising the error rate: a
//! one-sided group-sequential boundary with an α-spending function
//! (Lan–DeMets), computed by numerical integration over the standard
//! Brownian motion the look statistics follow (Armitage, McPherson and
//! Rowe's recursion; Jennison & Turnbull, *Group Sequential Methods*,
//! ch. 7 and 19).
//!
//! The error α is spent over the information fraction t ∈ (0, 1] (the
//! share of the largest sample the budget allows) by the Hwang–Shih–DeCani
//! family: α(t) = α·(1 − e^{−γt})/(1 − e^{−γ}); γ = −4 is close to
//! O'Brien–Fleming (almost nothing spent early, the last look close to a
//! single test), γ = 1 to Pocock. At each look the boundary c_k is chosen
//! so that the probability of crossing it there, not having crossed
//! before, is the α spent since the previous look; a test at that look
//! rejects when its p-value is below the nominal level 1 − Φ(c_k).
//! Looks need not be planned: each is computed when it is taken.
//!
//! Any number of looks: the recursion integrates the running sum's
//! density from one look to the next with a Gaussian kernel whose width
//! is the increment's sd, √Δt. A fixed grid cannot resolve a kernel
//! narrower than its step (past ~700 looks α was under-spent, past
//! ~2 700 a level reached 1), and a grid fine enough for any Δt costs
//! O(looks · (1/Δt)) per look. So a look closer than [`MIN_STEP`] to the
//! previous one taken is not taken (level 0: it spends nothing and
//! cannot reject), which bounds the looks taken by 1/[`MIN_STEP`] + 2,
//! and the grid's step is tied to the spacing of the looks taken (at
//! most a third of √Δt), so every kernel is resolved. Waiting for 1% of
//! the information between looks costs nothing measurable in power
//! (Jennison & Turnbull §7.2: beyond ~20 looks, more looks change the
//! boundary little). Every level is at most α: crossing at look k implies
//! crossing somewhere, so P(Z_k ≥ c_k) ≤ α and c_k ≥ Φ⁻¹(1 − α); the
//! solver never goes below that, whatever the integration does.
use statrs::distribution::{Continuous, ContinuousCDF, Normal};
use statrs::function::erf::erfc;

/// 1/√(2π).
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// The least information between two looks taken (see the module notes).
pub(crate) const MIN_STEP: f64 = 0.01;
/// Grid points per look at least (odd: Simpson's rule).
const GRID: usize = 241;
/// Grid points per look at most (a last look very near the previous one).
const MAX_GRID: usize = 4001;
/// The grid's step is at most the increment's sd over this.
const PER_SD: f64 = 3.0;
/// The grid spans ±this many standard deviations of the running sum.
const SPAN: f64 = 8.0;

/// The Hwang–Shih–DeCani spending function of `alpha` with shape `gamma`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spending {
    /// The error spent in all (one-sided).
    pub alpha: f64,
    /// Shape: negative spends late (O'Brien–Fleming-like), positive early.
    pub gamma: f64,
}

impl Spending {
    /// α spent by information fraction `t` (clamped to [0, 1]).
    pub fn spent(&self, t: f64) -> f64 {
        let t = t.clamp(0.0, 1.0);
        if self.gamma.abs() < 1e-9 {
            return self.alpha * t;
        }
        self.alpha * (1.0 - (-self.gamma * t).exp()) / (1.0 - (-self.gamma).exp())
    }
}

/// A one-sided boundary taken look by look.
#[derive(Clone, Debug)]
pub struct Boundary {
    spending: Spending,
    /// Information fraction of the last look (0 before the first).
    t: f64,
    /// α spent so far.
    spent: f64,
    /// The sub-density of the running sum S(t) = √t·Z over the paths that
    /// have not crossed, on an even grid (`lo`, step `h`); empty before
    /// the first look.
    lo: f64,
    h: f64,
    density: Vec<f64>,
}

fn simpson_weight(i: usize, n: usize, h: f64) -> f64 {
    if i == 0 || i == n - 1 {
        h / 3.0
    } else if i % 2 == 1 {
        4.0 * h / 3.0
    } else {
        2.0 * h / 3.0
    }
}

impl Boundary {
    /// A boundary spending `spending`, before any look.
    pub fn new(spending: Spending) -> Self {
        Self {
            spending,
            t: 0.0,
            spent: 0.0,
            lo: 0.0,
            h: 0.0,
            density: Vec::new(),
        }
    }

    /// The nominal one-sided level of a look at information fraction `t`
    /// (after the previous one's): a test at this look rejects when its
    /// p-value is at most this. Always in [0, α]: 0 when nothing is left
    /// to spend, when `t` does not advance, or when the look is closer
    /// than [`MIN_STEP`] to the previous one taken (unless it is the last,
    /// `t` = 1).
    pub fn look(&mut self, t: f64) -> f64 {
        if t.is_nan() || t <= self.t {
            return 0.0;
        }
        let t = t.min(1.0);
        let taken_before = !self.density.is_empty();
        // The tolerance lets looks at k/n, k + 1 ... apart by exactly
        // MIN_STEP in exact arithmetic be taken despite rounding.
        if taken_before && t < 1.0 && t - self.t < MIN_STEP * (1.0 - 1e-6) {
            return 0.0;
        }
        let target = self.spending.spent(t) - self.spent;
        let std = Normal::standard();
        // No look's level exceeds α (see the module notes).
        let floor = std.inverse_cdf(1.0 - self.spending.alpha.clamp(1e-300, 0.5));
        let c = if target <= 1e-15 {
            f64::INFINITY
        } else if !taken_before {
            // First look: S(t)/√t is standard normal.
            std.inverse_cdf(1.0 - target.min(self.spending.alpha))
                .max(floor)
        } else {
            self.solve(t, target, floor)
        };
        self.advance(t, c);
        // What was meant to be spent counts as spent even where the
        // boundary could not spend it all (conservative: never carried on).
        if c.is_finite() {
            self.spent += target;
        }
        let level = if c.is_finite() { 1.0 - std.cdf(c) } else { 0.0 };
        if level.is_finite() {
            level.clamp(0.0, self.spending.alpha)
        } else {
            0.0
        }
    }

    /// The probability of crossing `c` (in Z units) at `t`, from the
    /// current sub-density.
    fn crossing(&self, t: f64, c: f64) -> f64 {
        let sd = (t - self.t).sqrt();
        let edge = c * t.sqrt();
        let n = self.density.len();
        (0..n)
            .map(|i| {
                let u = self.lo + i as f64 * self.h;
                let x = (edge - u) / sd;
                // Beyond 9 sd the tail is below 1e-18: no erfc needed.
                let above = if x > 9.0 {
                    0.0
                } else if x < -9.0 {
                    1.0
                } else {
                    0.5 * erfc(x / std::f64::consts::SQRT_2)
                };
                simpson_weight(i, n, self.h) * self.density[i] * above
            })
            .sum()
    }

    /// The boundary whose crossing probability at `t` is `target`, no
    /// lower than `floor`.
    fn solve(&self, t: f64, target: f64, floor: f64) -> f64 {
        let (mut a, mut b) = (floor, floor.max(SPAN) * 2.0);
        if self.crossing(t, b) >= target {
            return b;
        }
        if self.crossing(t, a) < target {
            // Even the lowest boundary a look may have cannot spend it
            // all: spend what it can.
            return a;
        }
        // 50 halvings: the boundary to 10⁻¹³.
        for _ in 0..50 {
            let mid = (a + b) / 2.0;
            if self.crossing(t, mid) > target {
                a = mid;
            } else {
                b = mid;
            }
        }
        b
    }

    /// Moves the sub-density to `t`, cut at boundary `c` (Z units), on a
    /// grid whose step resolves the increment since the last look.
    fn advance(&mut self, t: f64, c: f64) {
        let std = Normal::standard();
        let sd_t = t.sqrt();
        let top = if c.is_finite() {
            (c * sd_t).min(SPAN * sd_t)
        } else {
            SPAN * sd_t
        };
        let lo = -SPAN * sd_t;
        let width = top - lo;
        let points = if self.density.is_empty() {
            GRID
        } else {
            let step = (t - self.t).sqrt() / PER_SD;
            let need = (width / step).ceil() as usize + 1;
            (need | 1).clamp(GRID, MAX_GRID)
        };
        let h = width / (points - 1) as f64;
        let density: Vec<f64> = if self.density.is_empty() {
            (0..points)
                .map(|j| std.pdf((lo + j as f64 * h) / sd_t) / sd_t)
                .collect()
        } else {
            let sd = (t - self.t).sqrt();
            let n = self.density.len();
            let weighted: Vec<(f64, f64)> = (0..n)
                .map(|i| {
                    (
                        self.lo + i as f64 * self.h,
                        simpson_weight(i, n, self.h) * self.density[i],
                    )
                })
                .collect();
            (0..points)
                .map(|j| {
                    let s = lo + j as f64 * h;
                    weighted
                        .iter()
                        // Beyond 9 sd the kernel is below 1e-18.
                        .filter(|(u, _)| (s - u).abs() < 9.0 * sd)
                        .map(|(u, w)| {
                            let x = (s - u) / sd;
                            w * (-0.5 * x * x).exp() * INV_SQRT_2PI / sd
                        })
                        .sum()
                })
                .collect()
        };
        self.t = t;
        self.lo = lo;
        self.h = h;
        self.density = density;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn z(p: f64) -> f64 {
        Normal::standard().inverse_cdf(1.0 - p)
    }

    #[test]
    fn one_look_is_a_plain_test() {
        let mut b = Boundary::new(Spending {
            alpha: 0.05,
            gamma: -4.0,
        });
        let level = b.look(1.0);
        assert!((level - 0.05).abs() < 1e-9, "{level}");
        assert_eq!(b.look(1.0), 0.0, "nothing left");
    }

    #[test]
    fn pocock_and_obrien_fleming_boundaries_match_the_tables() {
        // Five equally spaced looks, one-sided α = 0.025 (Jennison & Turnbull
        // table 2.1 / 2.3 give two-sided 0.05 constants: Pocock 2.413,
        // O'Brien–Fleming 2.040·√(5/k)). The Hwang–Shih–DeCani family
        // approximates them: γ = 1 gives near-constant boundaries around
        // 2.4; γ = −4 spends less early than Pocock but more than
        // O'Brien–Fleming's 4.56 at the first look (about 3.25), and ends
        // near its 2.04.
        let looks = |gamma: f64| {
            let mut b = Boundary::new(Spending {
                alpha: 0.025,
                gamma,
            });
            (1..=5)
                .map(|k| z(b.look(k as f64 / 5.0)))
                .collect::<Vec<f64>>()
        };
        let pocock = looks(1.0);
        for c in &pocock {
            assert!((2.2..2.7).contains(c), "{pocock:?}");
        }
        let obf = looks(-4.0);
        assert!((3.0..3.5).contains(&obf[0]), "{obf:?}");
        assert!((1.95..2.15).contains(&obf[4]), "{obf:?}");
        assert!(obf.windows(2).all(|w| w[0] > w[1]), "{obf:?}");
    }

    /// Standard normal draws: Box–Muller on a xorshift (seeded, so the
    /// tests are deterministic).
    struct Normals(u64);

    impl Normals {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }

        fn next(&mut self) -> f64 {
            let (a, b) = (self.uniform().max(1e-300), self.uniform());
            (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
        }
    }

    /// The share of `paths` standard Brownian motions, observed at
    /// `fractions`, that cross the boundary `levels` sets at some look.
    fn crossed(fractions: &[f64], levels: &[f64], paths: usize, seed: u64) -> f64 {
        let bounds: Vec<f64> = levels
            .iter()
            .map(|l| if *l > 0.0 { z(*l) } else { f64::INFINITY })
            .collect();
        let steps: Vec<(f64, f64)> = fractions
            .iter()
            .scan(0.0, |last, t| {
                let step = (t - *last).sqrt();
                *last = *t;
                Some((step, t.sqrt()))
            })
            .collect();
        let mut normal = Normals(seed);
        let mut crossed = 0;
        for _ in 0..paths {
            let mut s = 0.0;
            for ((step, sd), bound) in steps.iter().zip(&bounds) {
                s += normal.next() * step;
                if s >= bound * sd {
                    crossed += 1;
                    break;
                }
            }
        }
        crossed as f64 / paths as f64
    }

    #[test]
    fn the_error_spent_is_the_error_crossed_by_simulation() {
        // Brownian motion observed at 8 uneven looks; count crossings.
        let fractions = [0.2, 0.3, 0.45, 0.5, 0.62, 0.8, 0.9, 1.0];
        let mut b = Boundary::new(Spending {
            alpha: 0.05,
            gamma: -2.0,
        });
        let levels: Vec<f64> = fractions.iter().map(|t| b.look(*t)).collect();
        assert!(
            levels.iter().all(|l| *l > 0.0),
            "every look taken: {levels:?}"
        );
        let rate = crossed(&fractions, &levels, 40_000, 0x9e3779b97f4a7c15);
        // 40 000 paths: the binomial sd at 5% is 0.0011.
        assert!((rate - 0.05).abs() < 0.004, "{rate} {levels:?}");
    }

    #[test]
    fn a_thousand_or_five_thousand_looks_spend_alpha_and_no_more() {
        // A long budget planned as one look a round: 1 000 or 5 000 looks
        // (the fixed grid under-spent α past ~700 and gave levels of 1.0
        // past ~2 700). Under the null, the share of Brownian paths that
        // cross is α (4–5%; 20 000 paths: the binomial sd at 5% is
        // 0.0015, so 5.5% is 3 sd above).
        for (looks, seed) in [(1_000usize, 7u64), (5_000, 11)] {
            for gamma in [-1.0, -4.0] {
                let mut b = Boundary::new(Spending { alpha: 0.05, gamma });
                let fractions: Vec<f64> = (1..=looks).map(|k| k as f64 / looks as f64).collect();
                let levels: Vec<f64> = fractions.iter().map(|t| b.look(*t)).collect();
                for l in &levels {
                    assert!(l.is_finite() && (0.0..=0.05).contains(l), "{looks}: {l}");
                }
                let taken = levels.iter().filter(|l| **l > 0.0).count();
                assert!((50..=102).contains(&taken), "{looks} looks: {taken} taken");
                let rate = crossed(&fractions, &levels, 20_000, seed);
                eprintln!("{looks} looks (γ {gamma}): {taken} taken, {rate} crossed");
                assert!(
                    (0.04..=0.055).contains(&rate),
                    "{looks} looks, γ {gamma}: {rate}"
                );
            }
        }
    }

    #[test]
    fn no_level_is_one_or_nan_whatever_the_looks() {
        let mut draws = Normals(0x2545f4914f6cdd1d);
        for (alpha, gamma) in [(0.05, -1.0), (0.0125, -4.0), (0.05, 1.0), (0.5, 0.0)] {
            let spending = Spending { alpha, gamma };
            let mut schedules: Vec<Vec<f64>> = vec![
                (1..=10_000).map(|k| k as f64 / 10_000.0).collect(),
                vec![0.001, 0.5, 0.999_999_999, 1.0],
                vec![1e-9, 2e-9, 1.0],
                vec![0.3, 0.3, f64::NAN, 0.2, 0.7, 2.0, 3.0],
            ];
            // Uneven: random gaps, some far below the grid's step.
            let mut t = 0.0;
            let mut uneven = Vec::new();
            while t < 1.0 {
                t += (draws.uniform() * 0.02).powi(2);
                uneven.push(t.min(1.0));
            }
            schedules.push(uneven);
            for fractions in schedules {
                let mut b = Boundary::new(spending);
                for t in &fractions {
                    let l = b.look(*t);
                    assert!(
                        l.is_finite() && l >= 0.0 && l <= alpha,
                        "α {alpha} γ {gamma} at {t}: {l}"
                    );
                }
            }
        }
    }
}
