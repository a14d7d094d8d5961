//! File-name-safe names for charts and results files: defined beside the
//! results (a chart group's file stem is [`super::summary::GroupKey::slug`]),
//! used by the outputs.

/// Longest [`slug`], bytes: a chart's name adds at most a few dozen bytes,
/// so every file name stays far below NAME_MAX (255) whatever a payload or
/// phase is called.
pub(crate) const MAX_SLUG: usize = 96;

/// A file-name-safe form of `s`: ASCII alphanumerics, '-', '_' and '.'; other
/// characters become '-'. Longer than `MAX_SLUG`: cut, with a hash of the
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

/// Longest [`reversible`] name accepted, bytes (below NAME_MAX with room
/// for an extension).
pub(crate) const MAX_REVERSIBLE: usize = 200;

/// A file-name-safe form of `s` that keeps names apart and can be read
/// back: ASCII alphanumerics, '_', '-' and a '.' that does not lead stay;
/// every other byte of its UTF-8 becomes `%XX` (so `a b` is `a%20b`, `a/b`
/// `a%2Fb`, `é` `%C3%A9`, and `a-b` stays `a-b`). Distinct names give
/// distinct results; [`MAX_REVERSIBLE`] bounds what callers accept.
pub(crate) fn reversible(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, b) in s.bytes().enumerate() {
        let keep = b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && i > 0);
        if keep {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reversible_names_stay_apart_and_never_hide() {
        let names = ["a b", "a/b", "a-b", "é", "a%20b", ".", "..", ".hidden", ""];
        let stems: Vec<String> = names.iter().map(|n| reversible(n)).collect();
        assert_eq!(stems[0], "a%20b");
        assert_eq!(stems[1], "a%2Fb");
        assert_eq!(stems[2], "a-b");
        assert_eq!(stems[3], "%C3%A9");
        for (n, s) in names.iter().zip(&stems) {
            assert!(!s.starts_with('.') && !s.contains('/'), "{n:?} -> {s}");
        }
        let mut unique = stems.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), stems.len(), "{stems:?}");
    }

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
