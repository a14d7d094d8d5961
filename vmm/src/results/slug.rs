//! File-name-safe names for charts and results files: defined beside the
//! results (a chart group's file stem is [`super::summary::GroupKey::slug`]),
//! used by the outputs.

/// Longest [`slug`], bytes: a chart's name adds at most a few dozen bytes,
/// so every file name stays far below NAME_MAX (255) whatever a payload or
/// phase is called.
pub const MAX_SLUG: usize = 96;

/// A file-name-safe form of `s`: ASCII alphanumerics, '-', '_' and '.'; other
/// characters become '-'. Longer than [`MAX_SLUG`]: cut, with a hash of the
/// whole of `s` appended so that two long names that share a prefix stay
/// apart.
pub fn slug(s: &str) -> String {
    let full = slug_unbounded(s);
    if full.len() <= MAX_SLUG {
        return full;
    }
    // FNV-1a: stable across builds and platforms (file names must not change).
    let hash = s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let keep = MAX_SLUG - 9;
    format!("{}-{:08x}", full[..keep].trim_end_matches('-'), hash as u32)
}

fn slug_unbounded(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    out.trim_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_safe_bounded_and_distinct() {
        assert_eq!(slug("pingpong, 2 vCPUs / spin"), "pingpong-2-vCPUs-spin");
        // Issue 20, case 14: a 245-character payload name makes a file name
        // that fits, and two such names stay apart.
        let a = slug(&"p".repeat(245));
        let b = slug(&format!("{}q", "p".repeat(244)));
        assert!(a.len() <= MAX_SLUG && b.len() <= MAX_SLUG, "{a}");
        assert_ne!(a, b, "a shared prefix, different names");
        assert_eq!(slug(&"x".repeat(MAX_SLUG)), "x".repeat(MAX_SLUG));
    }
}
