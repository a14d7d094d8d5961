//! tracefs: where it is mounted, how to mount it, event ids and formats.
//!
//! Event ids (`events/<system>/<name>/id`) are what `perf_event_open`
//! needs as `config` for `PERF_TYPE_TRACEPOINT`; field names for in-kernel
//! filters come from the `format` file, parsed by [`parse_format`].

use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// Where tracefs is normally mounted.
pub const DEFAULT_TRACEFS: &str = "/sys/kernel/tracing";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    /// No tracefs (or debugfs with a `tracing` directory) in /proc/mounts.
    #[error("tracefs not mounted (use --mount-tracefs: VmConfig::mount_tracefs = true)")]
    NotMounted,
    /// The event directory does not exist.
    #[error("event {system}:{name} does not exist on this kernel")]
    NoSuchEvent {
        /// Event system, e.g. `kvm`.
        system: String,
        /// Event name, e.g. `kvm_exit`.
        name: String,
    },
    /// Reading a tracefs file failed.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A tracefs file did not parse.
    #[error("parsing {what}: {msg}")]
    Parse {
        /// Which file or item.
        what: String,
        /// What was wrong.
        msg: String,
    },
    /// `mount -t tracefs` failed.
    #[error("mount -t tracefs nodev {path} failed: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Result type of this module.
pub type Result<T> = std::result::Result<T, TracefsError>;

/// Decodes the octal escapes (`\040` for space) /proc/mounts uses.
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let digits = b
                .get(i + 1..i + 4)
                .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
            if let Some(d) = digits {
                let v = d.iter().fold(0u32, |a, c| a * 8 + u32::from(c - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Finds the tracing directory from the text of /proc/mounts.
///
/// Prefers a `tracefs` mount; otherwise returns `<debugfs>/tracing` (which
/// the caller should check exists). Among several tracefs mounts, the one at
/// [`DEFAULT_TRACEFS`] wins, then the first listed.
pub fn tracefs_from_mounts(mounts: &str) -> Option<PathBuf> {
    let mut tracefs: Vec<String> = Vec::new();
    let mut debugfs: Option<String> = None;
    for line in mounts.lines() {
        let mut it = line.split_whitespace();
        let (Some(_dev), Some(dir), Some(fstype)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        match fstype {
            "tracefs" => tracefs.push(unescape_mount_path(dir)),
            "debugfs" if debugfs.is_none() => debugfs = Some(unescape_mount_path(dir)),
            _ => {}
        }
    }
    if let Some(d) = tracefs.iter().find(|d| d.as_str() == DEFAULT_TRACEFS) {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = tracefs.into_iter().next() {
        return Some(PathBuf::from(d));
    }
    debugfs.map(|d| Path::new(&d).join("tracing"))
}

/// One field of an event's `format` file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldDesc {
    /// Field name, e.g. `exit_reason` (array suffix removed).
    pub name: String,
    /// C type as written, e.g. `unsigned int` or `char[16]`.
    pub ty: String,
    /// Byte offset in the raw record.
    pub offset: u32,
    /// Byte size.
    pub size: u32,
    /// Whether the field is signed.
    pub signed: bool,
    /// Whether it is one of the `common_*` fields every event has.
    pub common: bool,
}

/// A parsed `format` file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventFormat {
    /// Event name (`name:` line).
    pub name: String,
    /// Event id (`ID:` line).
    pub id: u64,
    /// Fields, common ones first, in file order.
    pub fields: Vec<FieldDesc>,
    /// The `print fmt:` text (may be empty).
    pub print_fmt: String,
}

impl EventFormat {
    /// The field called `name`, if any.
    pub fn field(&self, name: &str) -> Option<&FieldDesc> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The first of `candidates` that is a field of this event.
    pub fn first_field<'a>(&self, candidates: &[&'a str]) -> Option<&'a str> {
        candidates.iter().copied().find(|c| self.field(c).is_some())
    }
}

fn perr(what: &str, msg: impl Into<String>) -> TracefsError {
    TracefsError::Parse {
        what: what.to_string(),
        msg: msg.into(),
    }
}

/// Parses one `field:...;\toffset:N;\tsize:N;\tsigned:N;` line.
fn parse_field_line(line: &str) -> Result<FieldDesc> {
    let what = "format field";
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, None);
    for part in line.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once(':')
            .ok_or_else(|| perr(what, format!("no ':' in {part:?}")))?;
        let num = |v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| perr(what, format!("bad number {v:?} in {line:?}")))
        };
        match k.trim() {
            "field" => decl = Some(v.trim().to_string()),
            "offset" => offset = Some(num(v)?),
            "size" => size = Some(num(v)?),
            "signed" => signed = Some(num(v)? != 0),
            _ => {}
        }
    }
    let decl = decl.ok_or_else(|| perr(what, format!("no field: in {line:?}")))?;
    let (ty, raw_name) = decl
        .rsplit_once(char::is_whitespace)
        .ok_or_else(|| perr(what, format!("no type in {decl:?}")))?;
    // `char comm[16]` -> name `comm`, type `char[16]`.
    let (name, array) = match raw_name.find('[') {
        Some(i) => (&raw_name[..i], &raw_name[i..]),
        None => (raw_name, ""),
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(perr(what, format!("bad field name {raw_name:?}")));
    }
    Ok(FieldDesc {
        name: name.to_string(),
        ty: format!("{}{array}", ty.trim()),
        offset: offset.ok_or_else(|| perr(what, format!("no offset in {line:?}")))?,
        size: size.ok_or_else(|| perr(what, format!("no size in {line:?}")))?,
        signed: signed.unwrap_or(false),
        common: name.starts_with("common_"),
    })
}

/// Parses the text of an event's `format` file.
pub fn parse_format(text: &str) -> Result<EventFormat> {
    let mut name = None;
    let mut id = None;
    let mut fields = Vec::new();
    let mut print_fmt = String::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("name:") {
            name = Some(v.trim().to_string());
        } else if let Some(v) = t.strip_prefix("ID:") {
            id = Some(
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| perr("format", format!("bad ID {v:?}")))?,
            );
        } else if t.starts_with("field:") {
            fields.push(parse_field_line(t)?);
        } else if let Some(v) = t.strip_prefix("print fmt:") {
            print_fmt = v.trim().to_string();
        }
    }
    Ok(EventFormat {
        name: name.ok_or_else(|| perr("format", "no name: line"))?,
        id: id.ok_or_else(|| perr("format", "no ID: line"))?,
        fields,
        print_fmt,
    })
}

/// Parses the content of an `id` file.
pub fn parse_id(text: &str) -> Result<u64> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| perr("id", format!("bad event id {:?}", text.trim())))
}

/// Event formats parsed once and shared by every clone of a [`Tracefs`]
/// made with [`Tracefs::with_format_cache`].
type FormatCache = Arc<Mutex<HashMap<(String, String), Arc<EventFormat>>>>;

/// A located tracefs mount.
#[derive(Debug, Clone)]
pub struct Tracefs {
    root: PathBuf,
    formats: Option<FormatCache>,
}

impl PartialEq for Tracefs {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
    }
}

impl Eq for Tracefs {}

impl Tracefs {
    /// Uses `root` as the tracing directory (no check).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            formats: None,
        }
    }

    /// This tracefs, remembering each event format it parses: for a run
    /// whose threads each open the same events (a 1024-vCPU VM read and
    /// parsed `kvm_exit`'s format, a few KiB, 1024 times, and the heap kept
    /// ~10 MiB of it). Formats change only when KVM is reloaded, so the
    /// cache belongs to one run, not to the process.
    pub fn with_format_cache(mut self) -> Self {
        self.formats = Some(FormatCache::default());
        self
    }

    /// Finds the mounted tracing directory through /proc/mounts.
    pub fn find() -> Result<Self> {
        let mounts =
            std::fs::read_to_string("/proc/mounts").map_err(|source| TracefsError::Read {
                path: "/proc/mounts".into(),
                source,
            })?;
        let root = tracefs_from_mounts(&mounts).ok_or(TracefsError::NotMounted)?;
        if !root.join("events").is_dir() {
            return Err(TracefsError::NotMounted);
        }
        Ok(Self::at(root))
    }

    /// The tracing directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of event `system:name`.
    pub fn event_dir(&self, system: &str, name: &str) -> PathBuf {
        self.root.join("events").join(system).join(name)
    }

    /// Whether event `system:name` exists.
    pub fn has_event(&self, system: &str, name: &str) -> bool {
        self.event_dir(system, name).is_dir()
    }

    fn read_event_file(&self, system: &str, name: &str, file: &str) -> Result<String> {
        let dir = self.event_dir(system, name);
        if !dir.is_dir() {
            return Err(TracefsError::NoSuchEvent {
                system: system.into(),
                name: name.into(),
            });
        }
        let path = dir.join(file);
        std::fs::read_to_string(&path).map_err(|source| TracefsError::Read { path, source })
    }

    /// The perf id of event `system:name`.
    pub fn event_id(&self, system: &str, name: &str) -> Result<u64> {
        parse_id(&self.read_event_file(system, name, "id")?)
    }

    /// The parsed `format` of event `system:name`.
    pub fn event_format(&self, system: &str, name: &str) -> Result<EventFormat> {
        self.event_format_shared(system, name)
            .map(Arc::unwrap_or_clone)
    }

    /// [`Tracefs::event_format`], shared: with a format cache, every caller
    /// gets the one parsed copy.
    pub fn event_format_shared(&self, system: &str, name: &str) -> Result<Arc<EventFormat>> {
        let parse = || -> Result<Arc<EventFormat>> {
            Ok(Arc::new(parse_format(
                &self.read_event_file(system, name, "format")?,
            )?))
        };
        let Some(cache) = &self.formats else {
            return parse();
        };
        let key = (system.to_string(), name.to_string());
        if let Some(f) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(f);
        }
        let f = parse()?;
        if let Ok(mut c) = cache.lock() {
            c.insert(key, f.clone());
        }
        Ok(f)
    }

    /// Names of the events of `system` (sorted), e.g. all `kvm:*` events.
    pub fn events(&self, system: &str) -> Result<Vec<String>> {
        let dir = self.root.join("events").join(system);
        let rd = std::fs::read_dir(&dir).map_err(|source| TracefsError::Read {
            path: dir.clone(),
            source,
        })?;
        let mut v: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        v.sort();
        Ok(v)
    }
}

/// Mounts tracefs at [`DEFAULT_TRACEFS`] unless some tracefs is already
/// mounted; returns the tracing directory. Needs root. Only call this when
/// the user asked for it.
pub fn mount_tracefs() -> Result<Tracefs> {
    if let Ok(t) = Tracefs::find() {
        return Ok(t);
    }
    let path = PathBuf::from(DEFAULT_TRACEFS);
    let c = |s: &str| CString::new(s).unwrap_or_default();
    let (src, target, fstype) = (c("nodev"), c(DEFAULT_TRACEFS), c("tracefs"));
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the
    // call; `data` may be NULL for tracefs.
    let ret = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if ret != 0 {
        return Err(TracefsError::Mount {
            path,
            source: std::io::Error::last_os_error(),
        });
    }
    Tracefs::find()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KVM_EXIT: &str = include_str!("../testdata/kvm_exit.format");
    const KVM_APIC: &str = include_str!("../testdata/kvm_apic.format");
    const KVM_MSR: &str = include_str!("../testdata/kvm_msr.format");

    #[test]
    fn finds_tracefs_in_mounts() {
        let m = "sysfs /sys sysfs rw 0 0\n\
                 nodev /sys/kernel/tracing tracefs rw,relatime 0 0\n";
        assert_eq!(
            tracefs_from_mounts(m),
            Some(PathBuf::from("/sys/kernel/tracing"))
        );
        let m = "debugfs /sys/kernel/debug debugfs rw 0 0\n";
        assert_eq!(
            tracefs_from_mounts(m),
            Some(PathBuf::from("/sys/kernel/debug/tracing"))
        );
        // tracefs beats debugfs; the default mount point beats others.
        let m = "debugfs /sys/kernel/debug debugfs rw 0 0\n\
                 tracefs /mnt/my\\040trace tracefs rw 0 0\n\
                 tracefs /sys/kernel/tracing tracefs rw 0 0\n";
        assert_eq!(
            tracefs_from_mounts(m),
            Some(PathBuf::from("/sys/kernel/tracing"))
        );
        let m = "tracefs /mnt/my\\040trace tracefs rw 0 0\n";
        assert_eq!(tracefs_from_mounts(m), Some(PathBuf::from("/mnt/my trace")));
        assert_eq!(
            tracefs_from_mounts("proc /proc proc rw 0 0\ngarbage\n"),
            None
        );
        assert_eq!(tracefs_from_mounts(""), None);
    }

    #[test]
    fn parses_kvm_exit_format() {
        let f = parse_format(KVM_EXIT).unwrap();
        assert_eq!(f.name, "kvm_exit");
        assert_eq!(f.id, 103);
        let er = f.field("exit_reason").unwrap();
        assert_eq!((er.offset, er.size, er.signed), (8, 4, false));
        assert_eq!(er.ty, "unsigned int");
        let isa = f.field("isa").unwrap();
        assert_eq!((isa.offset, isa.size, isa.ty.as_str()), (24, 4, "u32"));
        assert!(f.field("common_pid").unwrap().common);
        assert!(f.field("common_pid").unwrap().signed);
        assert!(!er.common);
        assert_eq!(f.fields.len(), 13);
        assert!(f.print_fmt.contains("APIC_ACCESS"));
    }

    #[test]
    fn parses_apic_and_msr_formats() {
        let a = parse_format(KVM_APIC).unwrap();
        assert_eq!(a.first_field(&["write", "rw"]), Some("rw"));
        assert_eq!(a.field("reg").unwrap().offset, 12);
        assert_eq!(a.field("val").unwrap().size, 8);
        let m = parse_format(KVM_MSR).unwrap();
        assert_eq!(m.id, 99);
        assert_eq!(m.field("write").unwrap().ty, "unsigned");
        assert_eq!(m.field("ecx").unwrap().offset, 12);
        assert_eq!(m.field("exception").unwrap().size, 1);
        assert_eq!(m.first_field(&["index", "msr"]), None);
    }

    #[test]
    fn parses_array_fields_and_rejects_garbage() {
        let t = "name: x\nID: 7\nformat:\n\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:1;\n";
        let f = parse_format(t).unwrap();
        let c = f.field("comm").unwrap();
        assert_eq!((c.ty.as_str(), c.size, c.signed), ("char[16]", 16, true));
        assert!(parse_format("ID: 7\n").is_err());
        assert!(parse_format("name: x\n").is_err());
        assert!(parse_format("name: x\nID: seven\n").is_err());
        assert!(parse_format("name: x\nID: 1\n\tfield:int a;\toffset:z;\tsize:4;\n").is_err());
        assert!(parse_format("name: x\nID: 1\n\tfield:int a;\tsize:4;\n").is_err());
        assert!(parse_format("name: x\nID: 1\n\tfield:a;\toffset:1;\tsize:4;\n").is_err());
        assert_eq!(parse_id("103\n").unwrap(), 103);
        assert!(parse_id("").is_err());
        assert!(parse_id("-1").is_err());
    }

    #[test]
    fn missing_event_and_missing_root() {
        let t = Tracefs::at("/nonexistent-tracefs");
        assert!(matches!(
            t.event_id("kvm", "kvm_exit"),
            Err(TracefsError::NoSuchEvent { .. })
        ));
        assert!(!t.has_event("kvm", "kvm_exit"));
        assert!(t.events("kvm").is_err());
    }

    #[test]
    fn a_format_cache_parses_each_event_once_per_run() {
        let root = std::env::temp_dir().join(format!("ipivmm-fmt-cache-{}", std::process::id()));
        let dir = root.join("events/kvm/kvm_x");
        std::fs::create_dir_all(&dir).unwrap();
        let format =
            "name: kvm_x\nID: 7\nformat:\n\tfield:unsigned int a;\toffset:8;\tsize:4;\tsigned:0;\n";
        std::fs::write(dir.join("format"), format).unwrap();
        let cached = Tracefs::at(&root).with_format_cache();
        let shared = cached.clone();
        assert_eq!(cached.event_format("kvm", "kvm_x").unwrap().id, 7);
        std::fs::remove_file(dir.join("format")).unwrap();
        // A clone shares the cache; an uncached tracefs reads the file.
        assert_eq!(shared.event_format("kvm", "kvm_x").unwrap().id, 7);
        assert!(Tracefs::at(&root).event_format("kvm", "kvm_x").is_err());
        assert_eq!(Tracefs::at(&root), cached);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn live_tracefs_if_mounted() {
        let Ok(t) = Tracefs::find() else {
            eprintln!("skipping live_tracefs_if_mounted: tracefs not mounted");
            return;
        };
        if !t.has_event("kvm", "kvm_exit") {
            eprintln!("skipping live_tracefs_if_mounted: no kvm events");
            return;
        }
        let id = t.event_id("kvm", "kvm_exit").unwrap();
        let f = t.event_format("kvm", "kvm_exit").unwrap();
        assert_eq!(f.id, id);
        assert!(f.field("exit_reason").is_some());
        assert!(t.events("kvm").unwrap().iter().any(|e| e == "kvm_apic_ipi"));
        assert!(matches!(
            t.event_id("kvm", "no_such_event_here"),
            Err(TracefsError::NoSuchEvent { .. })
        ));
    }
}
