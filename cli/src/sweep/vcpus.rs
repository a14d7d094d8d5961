//! The vCPU counts of a sweep as the command line spells them: a
//! comma-separated list of counts and ranges, `2,4,8` or `2..1024`.
//!
//! A range `A..B` is the powers-of-two curve from `A` to `B`: `A`, `2A`,
//! `4A`, ... while at most `B`, then `B` itself if the doubling missed it
//! (`2..1024` = 2,4,8,...,1024; `2..180` = 2,4,...,128,180). Counts keep
//! their order, each once.

/// Longest list a sweep takes (a typo guard, far beyond any real curve).
pub const MAX_COUNTS: usize = 64;

/// Parses `--vcpus` of `sweep`.
pub fn parse(s: &str) -> Result<Vec<usize>, String> {
    let mut out: Vec<usize> = Vec::new();
    for item in s.split(',') {
        let item = item.trim();
        let counts = match item.split_once("..") {
            Some((a, b)) => range(count(a)?, count(b)?)?,
            None => vec![count(item)?],
        };
        for n in counts {
            if !out.contains(&n) {
                out.push(n);
            }
        }
        if out.len() > MAX_COUNTS {
            return Err(format!("more than {MAX_COUNTS} vCPU counts"));
        }
    }
    Ok(out)
}

fn count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("a vCPU count must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "'{s}' is not a vCPU count: use N, a list N,M,... or a powers-of-two range A..B (e.g. 2..1024)"
        )),
    }
}

/// The powers-of-two curve `a..b` (see the module).
pub fn range(a: usize, b: usize) -> Result<Vec<usize>, String> {
    if a > b {
        return Err(format!(
            "range {a}..{b}: the first count must not exceed the last"
        ));
    }
    let mut v = Vec::new();
    let mut n = a;
    while n <= b {
        v.push(n);
        match n.checked_mul(2) {
            Some(m) => n = m,
            None => break,
        }
    }
    if v.last() != Some(&b) {
        v.push(b);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges() {
        assert_eq!(parse("2"), Ok(vec![2]));
        assert_eq!(parse("2,4,8"), Ok(vec![2, 4, 8]));
        assert_eq!(
            parse("2..1024"),
            Ok(vec![2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
        );
        assert_eq!(parse("2..180"), Ok(vec![2, 4, 8, 16, 32, 64, 128, 180]));
        assert_eq!(parse("3..3"), Ok(vec![3]));
        assert_eq!(parse("1..4, 300, 4"), Ok(vec![1, 2, 4, 300]));
    }

    #[test]
    fn junk_is_refused_with_the_syntax() {
        for bad in [
            "",
            "0",
            "2,,4",
            "x",
            "2..",
            "..4",
            "8..2",
            "-1",
            "2..1024..4",
            "1.5",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        assert!(parse("two").unwrap_err().contains("2..1024"));
        assert!(parse("8..2").unwrap_err().contains("must not exceed"));
        let long: Vec<String> = (1..=65).map(|n| n.to_string()).collect();
        assert!(parse(&long.join(",")).is_err());
        assert_eq!(parse(&usize::MAX.to_string()), Ok(vec![usize::MAX]));
    }
}
