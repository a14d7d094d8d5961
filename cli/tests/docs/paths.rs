//! What the docs name in the tree exists: every file path in backticks
//! rooted at a directory of the repository (`vmm/src/run/mod.rs`,
//! `counters/src/specs.rs`), every Rust path in backticks that starts at a
//! crate (`ipivmm::host::kvm_info`, `ipivmm_cli::output`, `crate::...`) or at
//! a module of one (`run::prepare`, `commands::host_switch`), and the crate
//! lists of README.md and docs/architecture.md against the workspace.
use super::{blocks, markdown, read, repo};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The inline code spans of `text` outside fenced blocks, with line numbers.
fn spans(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut open: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for (j, part) in line.split('`').enumerate() {
            if j > 0 {
                // A backtick: a span opens or closes here.
                match open.take() {
                    Some(s) => out.push(s),
                    None => open = Some((i + 1, String::new())),
                }
            }
            if let Some((_, s)) = &mut open {
                if j == 0 {
                    s.push(' ');
                }
                s.push_str(part);
            }
        }
    }
    out
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs`.
fn expand(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(l), Some(r)) if l < r => path[l + 1..r]
            .split(',')
            .flat_map(|alt| expand(&format!("{}{alt}{}", &path[..l], &path[r + 1..])))
            .collect(),
        _ => vec![path.to_string()],
    }
}

/// The top-level directories of the repository (`vmm`, `docs`, ...).
fn top_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(repo())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect();
    dirs.sort();
    dirs
}

/// A Rust source file and the directory its child modules live in.
#[derive(Clone)]
struct Module {
    file: PathBuf,
    children: PathBuf,
}

impl Module {
    fn root(src: &str) -> Module {
        let dir = repo().join(src);
        let file = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| dir.join(f))
            .find(|f| f.exists())
            .unwrap_or_else(|| panic!("{src} has no lib.rs or main.rs"));
        Module {
            file,
            children: dir,
        }
    }

    fn child(&self, name: &str) -> Option<Module> {
        let flat = self.children.join(format!("{name}.rs"));
        let nested = self.children.join(name).join("mod.rs");
        [flat, nested]
            .into_iter()
            .find(|f| f.exists())
            .map(|file| Module {
                file,
                children: self.children.join(name),
            })
    }
}

/// The crates a path may start at, by the name code uses and by the short
/// name the docs use (`devices::lapic`, `abi::...`).
fn crate_roots() -> BTreeMap<&'static str, Module> {
    [
        ("abi", "abi/src"),
        ("devices", "devices/src"),
        ("term", "term/src"),
        ("counters", "counters/src"),
        ("testkit", "testkit/src"),
        ("analysis", "analysis/src"),
        ("ipivmm", "vmm/src"),
        ("ipivmm_analysis", "analysis/src"),
        ("ipivmm_cli", "cli/src"),
        ("ipivmm_abi", "abi/src"),
        ("ipivmm_host", "host/src"),
        ("ipivmm_counters", "counters/src"),
        ("ipivmm_devices", "devices/src"),
        ("ipivmm_term", "term/src"),
        ("ipivmm_testkit", "testkit/src"),
        ("ipivmm_tests", "tests/src"),
        ("ipivmm_guest", "guest-payload/sdk/src"),
        ("xtask", "xtask/src"),
    ]
    .into_iter()
    .map(|(name, src)| (name, Module::root(src)))
    .collect()
}

/// Every module of every crate, by its last name (`prepare` →
/// vmm/src/run/prepare.rs): where a path such as `run::prepare` may start.
fn modules_by_name(roots: &BTreeMap<&str, Module>) -> BTreeMap<String, Vec<Module>> {
    fn walk(m: &Module, out: &mut BTreeMap<String, Vec<Module>>) {
        let Ok(entries) = std::fs::read_dir(&m.children) else {
            return;
        };
        for e in entries.map(|e| e.unwrap().path()) {
            let name = match (e.is_dir(), e.extension().is_some_and(|x| x == "rs")) {
                (true, _) => e.file_name().unwrap().to_string_lossy().into_owned(),
                (false, true) => e.file_stem().unwrap().to_string_lossy().into_owned(),
                _ => continue,
            };
            if ["mod", "lib", "main"].contains(&name.as_str()) {
                continue;
            }
            if let Some(c) = m.child(&name) {
                out.entry(name).or_default().push(c.clone());
                if e.is_dir() {
                    walk(&c, out);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    for m in roots.values() {
        walk(m, &mut out);
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `word` occurs in `text` as a whole identifier after one of `before`.
fn defines(text: &str, word: &str) -> bool {
    const KINDS: &[&str] = &[
        "fn ",
        "struct ",
        "enum ",
        "trait ",
        "const ",
        "static ",
        "type ",
        "mod ",
        "union ",
        "macro_rules! ",
    ];
    KINDS.iter().any(|k| {
        let pat = format!("{k}{word}");
        text.match_indices(&pat).any(|(i, _)| {
            let after = text[i + pat.len()..].chars().next();
            let before = text[..i].chars().next_back();
            !after.is_some_and(is_ident) && !before.is_some_and(is_ident)
        })
    }) || reexports(text, word)
}

/// A `pub use` of `text` names `word` (re-exported under that name).
fn reexports(text: &str, word: &str) -> bool {
    text.match_indices("pub use ").any(|(i, _)| {
        let stmt = &text[i..i + text[i..].find(';').unwrap_or(text.len() - i)];
        stmt.split(|c: char| !is_ident(c)).any(|w| w == word)
    })
}

/// Whether `segments` name something from `m`: modules by their files,
/// then an item the module defines or re-exports; what follows an item
/// (a variant, a method, a constant) is an identifier its crate defines
/// somewhere (not checked further).
fn resolves(m: &Module, segments: &[&str], crate_text: &str) -> bool {
    let Some((first, rest)) = segments.split_first() else {
        return true;
    };
    if let Some(c) = m.child(first) {
        return resolves(&c, rest, crate_text);
    }
    let text = std::fs::read_to_string(&m.file).unwrap_or_default();
    // `mod x { ... }` inline, or an item; or one a `pub use m::*` brings.
    let item = defines(&text, first)
        && rest
            .iter()
            .all(|w| crate_text.split(|c: char| !is_ident(c)).any(|t| t == *w));
    item || globs(&text)
        .filter_map(|g| m.child(g))
        .any(|c| resolves(&c, segments, crate_text))
}

/// The modules `text` re-exports whole (`pub use name::*;`).
fn globs(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices("pub use ").filter_map(|(i, _)| {
        let stmt = &text[i + "pub use ".len()..];
        let stmt = &stmt[..stmt.find(';')?];
        stmt.strip_suffix("::*").filter(|m| m.chars().all(is_ident))
    })
}

/// All Rust source of the directory `m` lives in and below (its crate's
/// text, for the names after an item).
fn crate_text(src: &Path) -> String {
    let mut out = String::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().path())
        {
            if e.is_dir() {
                stack.push(e);
            } else if e.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&e).unwrap_or_default());
            }
        }
    }
    out
}

/// Names the docs give that are not in the tree on purpose: (doc, name, why).
const NOT_IN_THE_TREE: &[(&str, &str, &str)] = &[
    (
        "docs/architecture.md",
        "vmm/src/cli/args.rs",
        "the tree at 930ac73, before the crate split",
    ),
    (
        "docs/architecture.md",
        "vmm/src/cli/commands/mod.rs",
        "the tree at 930ac73",
    ),
    (
        "docs/architecture.md",
        "vmm/src/cli/commands/compare.rs",
        "the tree at 930ac73",
    ),
    (
        "docs/ci.md",
        "plans/my-kernel.toml",
        "the reader's own plan",
    ),
    (
        "docs/ci.md",
        "tests/ipi_props.rs",
        "a test in the reader's own crate",
    ),
];

#[test]
fn doc_paths_name_files_and_modules_that_exist() {
    let _host = crate::shared_host();
    let tops = top_dirs();
    let roots = crate_roots();
    let by_name = modules_by_name(&roots);
    let texts: BTreeMap<&str, String> = roots
        .iter()
        .map(|(n, m)| (*n, crate_text(&m.children)))
        .collect();
    let all_text: String = texts.values().map(String::as_str).collect();
    let (mut files, mut paths, mut untrue) = (0, 0, Vec::new());
    let mut excused = vec![false; NOT_IN_THE_TREE.len()];
    for (doc, text) in markdown() {
        for (line, span) in spans(&text) {
            for token in span.split_whitespace() {
                let token = token.trim_matches(|c: char| ",;:()'\"".contains(c));
                let at = format!("{doc}:{line}: `{token}`");
                if let Some(i) = NOT_IN_THE_TREE
                    .iter()
                    .position(|(d, n, _)| *d == doc && *n == token)
                {
                    excused[i] = true;
                    continue;
                }
                // A file or directory of the repository.
                let rooted = token
                    .split_once('/')
                    .is_some_and(|(top, rest)| tops.iter().any(|t| t == top) && !rest.is_empty());
                let placeholder = token.contains(['<', '*', '$', '=']) || token.contains("NAME");
                if rooted && !placeholder && !token.contains("::") {
                    // From the repository's root, or (a link's form) from
                    // the doc's own directory.
                    let doc_dir = repo().join(&doc).parent().unwrap().to_path_buf();
                    for p in expand(token) {
                        files += 1;
                        if !repo().join(&p).exists() && !doc_dir.join(&p).exists() {
                            untrue.push(format!("{at}: no file {p}"));
                        }
                    }
                    continue;
                }
                // A Rust path.
                if !token.contains("::") || token.contains(['{', '<', '(', ' ', '/']) {
                    continue;
                }
                let path = token.trim_end_matches("::");
                let segments: Vec<&str> = path.split("::").collect();
                if !segments
                    .iter()
                    .all(|s| !s.is_empty() && s.chars().all(is_ident))
                {
                    continue;
                }
                let (first, rest) = segments.split_first().unwrap();
                let ok = if let Some(m) = roots.get(first) {
                    resolves(m, rest, &texts[first])
                        || by_name
                            .get(*first)
                            .is_some_and(|ms| ms.iter().any(|m| resolves(m, rest, &all_text)))
                } else if *first == "crate" {
                    roots.iter().any(|(n, m)| resolves(m, rest, &texts[n]))
                } else if let Some(ms) = by_name.get(*first) {
                    ms.iter().any(|m| resolves(m, rest, &all_text))
                } else {
                    // Neither a crate nor a module (`Irqchip::User`,
                    // `KVM_CAP_X2APIC_API`): not a path of the tree.
                    continue;
                };
                paths += 1;
                if !ok {
                    untrue.push(format!("{at}: names nothing in the tree"));
                }
            }
        }
    }
    eprintln!("docs: {files} file paths and {paths} module paths checked");
    for (entry, used) in NOT_IN_THE_TREE.iter().zip(&excused) {
        assert!(
            used,
            "NOT_IN_THE_TREE excuses {entry:?}, which its doc no longer names: drop it"
        );
    }
    assert!(files > 50 && paths > 50, "{files} files, {paths} paths");
    assert!(
        untrue.is_empty(),
        "the docs name what the tree does not have:\n{}",
        untrue.join("\n")
    );
}

/// The workspace's members, from the root Cargo.toml.
fn members() -> Vec<String> {
    let manifest: toml::Table = read("Cargo.toml").parse().unwrap();
    manifest["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect()
}

fn package_name(dir: &str) -> String {
    let manifest: toml::Table = read(&format!("{dir}/Cargo.toml")).parse().unwrap();
    manifest["package"]["name"].as_str().unwrap().to_string()
}

#[test]
fn crate_lists_are_the_workspace() {
    let _host = crate::shared_host();
    let members = members();
    // docs/architecture.md: "a workspace of N crates", then one row per
    // crate: `dir` (`package`), and the separately built guest.
    let arch = read("docs/architecture.md");
    let count = [
        "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    ]
    .iter()
    .position(|w| arch.contains(&format!("a workspace of {w} crates")))
    .map(|i| i + 2)
    .expect("docs/architecture.md says how many crates");
    assert_eq!(count, members.len(), "docs/architecture.md's crate count");
    let mut rows = Vec::new();
    for line in arch
        .lines()
        .skip_while(|l| !l.starts_with("| crate |"))
        .skip(2)
    {
        if !line.starts_with('|') {
            break;
        }
        let cell = line
            .trim_start_matches('|')
            .split('|')
            .next()
            .unwrap()
            .trim();
        let names: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
        let dir = names[0].trim_end_matches('/');
        if dir == "guest-payload" {
            continue;
        }
        if let Some(pkg) = names.get(1) {
            assert_eq!(
                *pkg,
                package_name(dir),
                "docs/architecture.md's row of {dir}"
            );
        }
        rows.push(dir.to_string());
    }
    let (mut want, mut got) = (members.clone(), rows);
    want.sort();
    got.sort();
    assert_eq!(got, want, "docs/architecture.md's crate table");
    // README.md's layout: every directory it lists exists, every member is
    // listed.
    let readme = read("README.md");
    let layout = blocks("README.md", &readme)
        .into_iter()
        .find(|b| b.lang == "text" && b.lines.iter().any(|l| l.starts_with("vmm/ ")))
        .expect("the README's layout");
    let dirs: Vec<String> = layout
        .lines
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.ends_with('/'))
        .map(|w| w.trim_end_matches('/').to_string())
        .collect();
    for d in &dirs {
        assert!(repo().join(d).is_dir(), "README.md's layout lists {d}/");
    }
    for m in &members {
        assert!(dirs.contains(m), "README.md's layout does not list {m}/");
    }
}

/// The file of the deepest module `path` names from the engine's root
/// (`run::prepare` → vmm/src/run/prepare.rs, `vm::Vm::build` → vm's file).
fn engine_module_file(path: &str) -> PathBuf {
    let mut m = crate_roots()["ipivmm"].clone();
    for seg in path.split("::") {
        match m.child(seg) {
            Some(c) => m = c,
            None => break,
        }
    }
    m.file
}

/// docs/architecture.md's stages of a run are numbered as the code numbers
/// them (each stage's module says "Stage N of a run"), and there are as
/// many as it says.
#[test]
fn run_stages_are_numbered_as_the_code_numbers_them() {
    let _host = crate::shared_host();
    let arch = read("docs/architecture.md");
    let section = arch
        .split("## One run, in stages")
        .nth(1)
        .expect("docs/architecture.md has the stages");
    let mut stages = Vec::new();
    for line in section.lines() {
        let Some((n, rest)) = line.split_once(". **") else {
            continue;
        };
        let Ok(n) = n.parse::<usize>() else { continue };
        let (name, rest) = rest.split_once("** (`").expect("N. **name** (`path`)");
        let path = rest.split('`').next().unwrap();
        let file = engine_module_file(path);
        let code = std::fs::read_to_string(&file).unwrap();
        assert!(
            code.contains(&format!("Stage {n} of a run")),
            "docs/architecture.md numbers {name} ({path}) stage {n}; {} does not say \"Stage {n} of a run\"",
            file.display()
        );
        stages.push((n, name.to_string()));
    }
    assert_eq!(
        stages.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        (0..stages.len()).collect::<Vec<_>>(),
        "in order from 0"
    );
    // "stage N, name" elsewhere in the doc says the list's number.
    for (i, _) in arch.match_indices("stage ") {
        let rest = &arch[i + "stage ".len()..];
        let Some((n, name)) = rest.split_once(", ") else {
            continue;
        };
        let name = name
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or("");
        let Ok(n) = n.parse::<usize>() else { continue };
        if let Some((want, _)) = stages.iter().find(|(_, s)| s == name) {
            assert_eq!(n, *want, "docs/architecture.md calls {name} stage {n}");
        }
    }
    assert!(
        section.contains(&format!(
            "`run::run` is {} stages",
            ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight"][stages.len()]
        )),
        "docs/architecture.md's count of stages ({})",
        stages.len()
    );
}
