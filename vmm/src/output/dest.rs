//! Output destinations, opened and checked before a run so a bad path costs
//! nothing: `-` is stdout, anything else a file; plot directories are
//! created and probed for writability.
use std::io::Write;
use std::path::Path;

/// Whether `path` means stdout.
pub fn is_stdout(path: Option<&Path>) -> bool {
    path.is_some_and(|p| p.as_os_str() == "-")
}

/// Opens `path` for `flag` (e.g. "--csv"): stdout for `-`, else creates the file.
pub fn open(path: &Path, flag: &str) -> Result<Box<dyn Write>, String> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(std::io::stdout()));
    }
    std::fs::File::create(path)
        .map(|f| Box::new(std::io::BufWriter::new(f)) as Box<dyn Write>)
        .map_err(|e| {
            format!(
                "cannot write {flag} {}: {e}; pick a writable path",
                path.display()
            )
        })
}

/// Creates `dir` if needed and checks a file can be written in it.
pub fn prepare_dir(dir: &Path, flag: &str) -> Result<(), String> {
    let fail = |e: std::io::Error| {
        format!(
            "cannot write {flag} {}: {e}; pick a writable directory",
            dir.display()
        )
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(".ipivmm-write-test");
    std::fs::File::create(&probe).map_err(fail)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_destinations_are_one_line_errors() {
        let e = open(Path::new("/nonexistent/dir/x.csv"), "--csv")
            .err()
            .unwrap();
        assert!(
            e.starts_with("cannot write --csv /nonexistent/dir/x.csv") && !e.contains('\n'),
            "{e}"
        );
        let e = prepare_dir(Path::new("/proc/self/ipivmm-plots"), "--plot").unwrap_err();
        assert!(e.starts_with("cannot write --plot"), "{e}");
        let dir = std::env::temp_dir().join(format!("ipivmm-dest-{}", std::process::id()));
        prepare_dir(&dir.join("a/b"), "--plot").unwrap();
        assert!(dir.join("a/b").is_dir());
        assert!(!dir.join("a/b/.ipivmm-write-test").exists());
        let _ = std::fs::remove_dir_all(&dir);
        assert!(is_stdout(Some(Path::new("-"))) && !is_stdout(None));
    }
}
