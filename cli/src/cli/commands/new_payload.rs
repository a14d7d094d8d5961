//! `ipivmm new-payload NAME [DIR]`: write a payload crate and print the one
//! command that builds and runs it, with absolute paths so that it works
//! from any directory.
use super::fail;
use crate::cli::args::NewPayloadArgs;
use ipivmm::payload::template;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Run the `new-payload` subcommand.
pub fn main(args: &NewPayloadArgs) -> ExitCode {
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    let dir = match std::path::absolute(&dir) {
        Ok(d) => d,
        Err(e) => return fail(format!("{}: {e}", dir.display())),
    };
    let written = match template::write(&args.name, &dir) {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    let ipivmm = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("ipivmm"));
    println!(
        "ipivmm: wrote payload crate '{}' in {} ({} files; the ipivmm-guest SDK {} is copied into ipivmm-sdk/)",
        args.name,
        dir.display(),
        written.len(),
        env!("CARGO_PKG_VERSION")
    );
    println!("build and run it with:");
    println!(
        "  cd {} && cargo build --release && {} run --payload {}",
        quote(&dir),
        quote(&ipivmm),
        template::elf_path(&args.name).display()
    );
    ExitCode::SUCCESS
}

/// `p` as one shell word: as is when it holds only safe characters, else in
/// single quotes.
fn quote(p: &Path) -> String {
    let s = p.display().to_string();
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_quoted_for_the_shell() {
        assert_eq!(quote(Path::new("/tmp/demo")), "/tmp/demo");
        assert_eq!(quote(Path::new("/tmp/my demo")), "'/tmp/my demo'");
        assert_eq!(quote(Path::new("/tmp/it's")), r"'/tmp/it'\''s'");
    }
}
