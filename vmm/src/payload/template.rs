//! A new payload crate, as `ipivmm new-payload NAME [DIR]` writes it: a
//! standalone cargo workspace that builds from its own directory with
//! `cargo build --release`, wherever it is.
//!
//! - `Cargo.toml`: the payload (`[[bin]] NAME`), its own `[workspace]` and
//!   the guest profiles (`panic = "abort"`, fat LTO);
//! - `.cargo/config.toml`, `link.ld`, `build.rs`: the payload flags, linker
//!   script and flag check of `examples/exit-roundtrip` (the same flags as
//!   the built-in payload's; a unit test keeps them equal);
//! - `src/main.rs`: one phase of `cpuid` round trips, ready to change;
//! - `ipivmm-sdk/`: a copy of the `ipivmm-guest` SDK and the `ipivmm-abi`
//!   crate, embedded in this binary when it was built.
//!
//! The SDK is copied rather than referenced by the path of the ipivmm
//! checkout: the crate then builds from any directory, on any machine, after
//! the checkout moved or with an installed `ipivmm`, without a registry, and
//! its ABI is exactly the one of the ipivmm that wrote it (the one that will
//! run it). The price is that a later SDK change does not reach the copy:
//! write a new crate, or replace `ipivmm-sdk/` from a newer `ipivmm new-payload`.
//!
//! ```
//! use ipivmm::payload::template;
//!
//! let dir = std::env::temp_dir().join(format!("doc-new-payload-{}", std::process::id()));
//! let written = template::write("demo", &dir)?;
//! assert!(written.iter().any(|p| p.ends_with("src/main.rs")));
//! assert!(dir.join("ipivmm-sdk/guest/src/lib.rs").is_file());
//! assert!(template::write("demo", &dir).is_err()); // never over a non-empty directory
//! assert!(template::write("9lives", &dir.join("x")).is_err()); // not a crate name
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), ipivmm::payload::CrateError>(())
//! ```
use super::CrateError;
use std::path::{Path, PathBuf};

mod sources {
    include!(concat!(env!("OUT_DIR"), "/sdk_sources.rs"));
}

/// Every `.rs` file of the SDK (`guest/src/...`) and the ABI
/// (`abi/src/...`), as written under `ipivmm-sdk/`.
use sources::SDK_SOURCES;

/// Where cargo puts the payload's ELF, relative to the crate directory.
const ELF_DIR: &str = "target/x86_64-unknown-linux-gnu/release";

/// Where `cargo build --release` puts the ELF of the crate [`write()`] wrote
/// for `name`, relative to the crate's directory.
pub fn elf_path(name: &str) -> PathBuf {
    Path::new(ELF_DIR).join(name)
}

const CARGO_TOML: &str = include_str!("template/Cargo.toml.in");
const MAIN_RS: &str = include_str!("template/main.rs.in");
const GITIGNORE: &str = include_str!("template/gitignore.in");
const CONFIG_TOML: &str = include_str!("../../../examples/exit-roundtrip/.cargo/config.toml");
const LINK_LD: &str = include_str!("../../../examples/exit-roundtrip/link.ld");
const BUILD_RS: &str = include_str!("../../../examples/exit-roundtrip/build.rs");
const LICENSE: &str = "Apache-2.0 OR BSD-3-Clause";

/// Checks that `name` can name the payload: a cargo package and binary
/// name (a letter, then letters, digits, `-` or `_`; at most 64), and none
/// of the crates the SDK copy brings.
pub(crate) fn check_name(name: &str) -> Result<(), CrateError> {
    let bad = |problem| {
        Err(CrateError::BadName {
            name: name.to_string(),
            problem,
        })
    };
    let mut chars = name.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic()) {
        return bad("must start with a letter (e.g. my-payload)");
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return bad("may hold only letters, digits, '-' and '_'");
    }
    if name.len() > 64 {
        return bad("is longer than 64 characters");
    }
    let lower = name.to_ascii_lowercase().replace('_', "-");
    if ["ipivmm-guest", "ipivmm-abi", "core", "std", "alloc", "test"].contains(&lower.as_str()) {
        return bad("is taken (by the SDK copy or by Rust): choose another");
    }
    // Cargo refuses a binary named like a directory of its own output
    // (`target/<profile>/{deps,build,examples,incremental}`).
    if ["deps", "build", "examples", "incremental"].contains(&name) {
        return bad("is a directory cargo keeps its build output in, which cargo refuses as a binary name: choose another (e.g. my-payload)");
    }
    Ok(())
}

fn manifest(package: &str, description: &str, deps: &str, extra: &str) -> String {
    format!(
        "# A copy of {package} {version}, written by `ipivmm new-payload`.\n\
         [package]\nname = \"{package}\"\ndescription = \"{description}\"\n\
         version = \"{version}\"\nedition = \"2021\"\nlicense = \"{LICENSE}\"\npublish = false\n\n\
         [lib]\n# Freestanding: no test harness.\ntest = false\ndoctest = false\nbench = false\n\n\
         [dependencies]\n{deps}{extra}",
        version = env!("CARGO_PKG_VERSION"),
    )
}

/// The ABI copy's sources test the host's features (`host`, `clap`: serde,
/// strum and clap derives) that the copy does not have: declared as known
/// cfg values, so the guest build does not warn "unexpected cfg" ten times.
const ABI_HOST_FEATURES: &str = "\n# The host's features (ipivmm's abi/Cargo.toml), named in the sources and\n\
     # never enabled in a guest: known, so rustc does not warn of them.\n\
     [lints.rust]\nunexpected_cfgs = { level = \"warn\", check-cfg = ['cfg(feature, values(\"host\", \"clap\"))'] }\n";

/// The files of payload crate `name`: (path relative to its directory,
/// contents). Checks the name first.
fn files(name: &str) -> Result<Vec<(PathBuf, String)>, CrateError> {
    check_name(name)?;
    let fill = |t: &str| {
        t.replace("{name}", name)
            .replace("{version}", env!("CARGO_PKG_VERSION"))
    };
    let mut files: Vec<(PathBuf, String)> = vec![
        ("Cargo.toml".into(), fill(CARGO_TOML)),
        (".cargo/config.toml".into(), CONFIG_TOML.to_string()),
        ("link.ld".into(), LINK_LD.to_string()),
        ("build.rs".into(), BUILD_RS.to_string()),
        ("src/main.rs".into(), fill(MAIN_RS)),
        (".gitignore".into(), GITIGNORE.to_string()),
        (
            "ipivmm-sdk/guest/Cargo.toml".into(),
            manifest(
                "ipivmm-guest",
                "no_std SDK for ipivmm guest payloads",
                "ipivmm-abi = { path = \"../abi\" }\n",
                "",
            ),
        ),
        (
            "ipivmm-sdk/abi/Cargo.toml".into(),
            manifest(
                "ipivmm-abi",
                "The guest ABI shared by the ipivmm host and its payloads",
                "",
                ABI_HOST_FEATURES,
            ),
        ),
    ];
    for (path, text) in SDK_SOURCES {
        files.push((Path::new("ipivmm-sdk").join(path), (*text).to_string()));
    }
    Ok(files)
}

/// Writes payload crate `name` into `dir`, which must not exist or be
/// empty; returns the files written. The crate is assembled in a sibling
/// temporary directory and renamed into place, so `dir` is either complete
/// or untouched.
pub fn write(name: &str, dir: &Path) -> Result<Vec<PathBuf>, CrateError> {
    let files = files(name)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| CrateError::Write { path, error }
    };
    if let Ok(mut entries) = std::fs::read_dir(dir) {
        if entries.next().is_some() {
            return Err(CrateError::NotEmpty(dir.to_path_buf()));
        }
    } else if dir.exists() {
        return Err(CrateError::NotEmpty(dir.to_path_buf()));
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(io(&parent))?;
    let tmp = parent.join(format!(".{name}.new-payload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let result = write_all(&tmp, &files).and_then(|()| {
        // rename(2) replaces an empty directory.
        std::fs::rename(&tmp, dir).map_err(io(dir))
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result?;
    Ok(files.into_iter().map(|(p, _)| dir.join(p)).collect())
}

fn write_all(root: &Path, files: &[(PathBuf, String)]) -> Result<(), CrateError> {
    for (rel, text) in files {
        let path = root.join(rel);
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|error| CrateError::Write {
                path: d.to_path_buf(),
                error,
            })?;
        }
        std::fs::write(&path, text).map_err(|error| CrateError::Write { path, error })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `rustflags` strings of a cargo config, comments dropped.
    fn rustflags(config: &str) -> Vec<String> {
        let start = config.find("rustflags = [").expect("rustflags");
        let end = start + config[start..].find("\n]").expect("end of rustflags");
        config[start..end]
            .lines()
            .skip(1)
            .map(|l| l.split('#').next().unwrap_or(""))
            // The quoted strings: every other piece between quotes.
            .flat_map(|l| l.split('"').skip(1).step_by(2).map(str::to_string))
            .collect()
    }

    #[test]
    fn flags_are_the_builtin_payloads() {
        let builtin = include_str!("../../../guest-payload/.cargo/config.toml");
        assert_eq!(rustflags(CONFIG_TOML), rustflags(builtin));
        assert_eq!(rustflags(builtin).len(), 16, "{:?}", rustflags(builtin));
        assert!(rustflags(CONFIG_TOML).contains(&"target-feature=-sse,-sse2,+soft-float".into()));
        assert_eq!(
            LINK_LD,
            include_str!("../../../guest-payload/payload/link.ld")
        );
    }

    #[test]
    fn the_crate_has_its_sdk_and_one_phase() {
        let files = files("demo").unwrap();
        let get = |p: &str| {
            files
                .iter()
                .find(|(q, _)| q == Path::new(p))
                .map(|(_, t)| t.as_str())
                .unwrap_or_else(|| panic!("no {p}"))
        };
        assert!(get("Cargo.toml").contains("name = \"demo\""));
        assert!(!get("Cargo.toml").contains("{name}"));
        assert!(get("src/main.rs").contains("measure_both_ways(PHASE, \"cpuid\""));
        assert!(get("src/main.rs").contains("println!(\"demo: done\")"));
        for f in ["guest/src/lib.rs", "guest/src/runtime.rs", "abi/src/lib.rs"] {
            assert!(!get(&format!("ipivmm-sdk/{f}")).is_empty(), "{f}");
        }
        // Every member of the new workspace has a manifest.
        assert!(get("ipivmm-sdk/guest/Cargo.toml").contains("path = \"../abi\""));
        assert!(get("ipivmm-sdk/abi/Cargo.toml").contains("name = \"ipivmm-abi\""));
    }

    #[test]
    fn names_cargo_would_refuse_are_refused() {
        for bad in [
            "",
            "9lives",
            "a b",
            "x/y",
            "ipivmm-guest",
            "ipivmm_abi",
            "core",
            // Issue 20, case 12: cargo's reserved binary names.
            "deps",
            "build",
            "examples",
            "incremental",
        ] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.starts_with("payload name '") && !e.contains('\n'), "{e}");
        }
        for good in ["demo", "my-payload", "x2_apic"] {
            check_name(good).unwrap();
        }
    }
}
