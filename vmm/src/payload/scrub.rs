//! The environment of a nested payload build: what of the outer build must
//! not leak into it (its flags, wrappers, target dir, profile and target
//! settings, and what cargo sets for build scripts).
//!
//! `std` only: `vmm/build.rs` includes this file (`#[path]`) to build the
//! built-in payload the same way the library builds a user's.

use std::process::Command;

/// Environment variables removed from a nested payload build: flags and
/// wrappers of the outer build, and what cargo sets for build scripts.
pub(crate) const REMOVED_VARS: &[&str] = &[
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC_LINKER",
    // Set by cargo for build scripts; meaningless (or harmful) below.
    "TARGET",
    "HOST",
    "OUT_DIR",
    "PROFILE",
    "OPT_LEVEL",
    "DEBUG",
    "NUM_JOBS",
];

/// `CARGO_*` variables a nested build keeps (home, jobserver, network and
/// terminal settings); every other `CARGO_*` variable is removed
/// (`CARGO_ENCODED_RUSTFLAGS`, `CARGO_TARGET_DIR`, `CARGO_BUILD_TARGET`,
/// `CARGO_PROFILE_*`, `CARGO_CFG_*`, ...).
pub(crate) const KEPT_CARGO_PREFIXES: &[&str] = &[
    "CARGO_HOME",
    "CARGO_MAKEFLAGS",
    "CARGO_NET_",
    "CARGO_HTTP_",
    "CARGO_TERM_",
];

/// True when a nested payload build must not inherit the variable `key`
/// (see `REMOVED_VARS` and `KEPT_CARGO_PREFIXES`).
pub(crate) fn is_scrubbed(key: &str) -> bool {
    let cargo_var =
        key.starts_with("CARGO_") && !KEPT_CARGO_PREFIXES.iter().any(|p| key.starts_with(p));
    cargo_var || REMOVED_VARS.contains(&key)
}

/// Removes from `cmd` every variable of this process's environment that
/// `is_scrubbed` names.
pub fn scrub_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if let Some(key) = key.to_str() {
            if is_scrubbed(key) {
                cmd.env_remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_scrubbed;

    #[test]
    fn flags_and_target_settings_go_home_and_path_stay() {
        assert!(is_scrubbed("RUSTFLAGS"));
        assert!(is_scrubbed("CARGO_ENCODED_RUSTFLAGS"));
        assert!(is_scrubbed("CARGO_TARGET_DIR"));
        assert!(!is_scrubbed("CARGO_HOME"));
        assert!(!is_scrubbed("PATH"));
    }
}
