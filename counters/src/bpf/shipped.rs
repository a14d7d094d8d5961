//! The BPF object shipped in the tree (`bpf/kvm_exits.bpf.o`) and the
//! record beside it (`bpf/kvm_exits.bpf.o.sum`, written by
//! `scripts/build-bpf.sh`): what the object was built from. `build.rs`
//! includes this file too, so the build and the tests read the record one
//! way.

/// The source, the object and the record, relative to the crate.
pub const SOURCE: &str = "bpf/kvm_exits.bpf.c";
/// The object built from [`SOURCE`], committed.
pub const OBJECT: &str = "bpf/kvm_exits.bpf.o";
/// What [`OBJECT`] was built from.
pub const RECORD: &str = "bpf/kvm_exits.bpf.o.sum";

/// What the shipped object was built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// CRC-32 (IEEE) of the source the object was built from.
    pub source_crc32: u32,
    /// The compiler's `--version` first line.
    pub compiler: String,
    /// The compiler flags (the source and `-o` excluded).
    pub flags: Vec<String>,
}

impl Record {
    /// Reads the record's text; Err names what is missing.
    pub fn parse(text: &str) -> Result<Self, String> {
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
                .map(str::trim)
                .ok_or_else(|| format!("{RECORD} has no `{key}` line"))
        };
        let crc = field("source-crc32")?;
        let source_crc32 = u32::from_str_radix(crc, 16)
            .map_err(|e| format!("{RECORD}: source-crc32 {crc:?}: {e}"))?;
        Ok(Self {
            source_crc32,
            compiler: field("compiler")?.to_string(),
            flags: field("flags")?
                .split_whitespace()
                .map(String::from)
                .collect(),
        })
    }

    /// Whether `source` is what the object was built from.
    pub fn matches(&self, source: &[u8]) -> bool {
        crc32fast::hash(source) == self.source_crc32
    }
}
