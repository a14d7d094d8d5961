//! The state file: what a switch changed, written atomically before the
//! module is unloaded, read back by a restore and by crash recovery.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::error::SwitchError;
use super::settings::ModuleSetting;
use super::{STATE_FORMAT, VENDOR_MODULES};

/// What a switch changed, written before the module is unloaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Always [`STATE_FORMAT`].
    pub format: String,
    /// The vendor module.
    pub module: String,
    /// Every readable parameter of the module before the switch (raw
    /// strings as sysfs printed them).
    pub original: BTreeMap<String, String>,
    /// The settings applied.
    pub settings: Vec<ModuleSetting>,
    /// `kvm` module parameters before the switch (for the report; `kvm`
    /// may be unloaded and reloaded with the vendor module).
    #[serde(default)]
    pub kvm_original: BTreeMap<String, String>,
    /// The process that switched.
    pub pid: u32,
    /// Its start time (`/proc/<pid>/stat` field 22), against pid reuse.
    pub pid_start: Option<u64>,
    /// Seconds since the Unix epoch.
    pub timestamp: u64,
}

/// Start time of `pid` in clock ticks since boot (`/proc/<pid>/stat`
/// field 22), if the process exists.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and ')': skip past the
    // last ')'; the rest starts at field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl State {
    pub(super) fn new(
        module: &str,
        original: BTreeMap<String, String>,
        settings: &[ModuleSetting],
        kvm_original: BTreeMap<String, String>,
    ) -> Self {
        let pid = std::process::id();
        State {
            format: STATE_FORMAT.to_string(),
            module: module.to_string(),
            original,
            settings: settings.to_vec(),
            kvm_original,
            pid,
            pid_start: process_start(pid),
            timestamp: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        }
    }

    /// Whether the process that wrote this state is still running (same pid
    /// and, when recorded, same start time).
    pub fn owner_alive(&self) -> bool {
        match (process_start(self.pid), self.pid_start) {
            (None, _) => false,
            (Some(now), Some(then)) => now == then,
            (Some(_), None) => true,
        }
    }

    /// Whether this process wrote it.
    pub fn is_ours(&self) -> bool {
        self.pid == std::process::id() && self.owner_alive()
    }
}

/// Writes `state` to `path` atomically: a temporary file in the same
/// directory, fsync, then rename. On any error the temporary file is
/// removed and `path` is left as it was.
pub fn write_state(path: &Path, state: &State) -> Result<(), SwitchError> {
    let io = |source| SwitchError::StateIo {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.unwrap_or_else(|| "state".into()),
        std::process::id()
    ));
    let json = serde_json::to_vec_pretty(state)
        .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    let result = write_and_rename(&tmp, path, &json);
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}

fn write_and_rename(tmp: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)?;
    f.write_all(bytes)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(tmp, path)
}

/// Reads a state file; `Ok(None)` when there is none.
pub fn read_state(path: &Path) -> Result<Option<State>, SwitchError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SwitchError::StateIo {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let invalid = |detail: String| SwitchError::StateInvalid {
        path: path.to_path_buf(),
        detail,
    };
    let state: State = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    if state.format != STATE_FORMAT {
        return Err(invalid(format!(
            "format {:?}, expected {STATE_FORMAT:?}",
            state.format
        )));
    }
    if !VENDOR_MODULES.contains(&state.module.as_str()) {
        return Err(invalid(format!("module {:?}", state.module)));
    }
    Ok(Some(state))
}

/// Crash recovery: the state file at `path` when the process that wrote it
/// is gone (a switch that was never restored); `Ok(None)` when there is no
/// state file or its owner is still running.
pub fn pending_restore(path: &Path) -> Result<Option<State>, SwitchError> {
    Ok(read_state(path)?.filter(|s| !s.owner_alive()))
}

pub(super) fn remove_state(path: &Path) -> Result<(), SwitchError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(SwitchError::StateIo {
            path: path.to_path_buf(),
            source,
        }),
    }
}
