//! Following the guest's serial console as the emulator writes it: the
//! lines init.sh prints (`lab: ...`), its heartbeat, and the kernel's own
//! signs that a boot is over (a panic, a reboot).
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

/// What a console line means to the host.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// `lab: heartbeat ...`: the guest's user space still runs.
    Heartbeat,
    /// `lab: step NAME: ...`: a step started or ended (NAME).
    Step(String),
    /// `lab: done`: results written, the guest powers off.
    Done,
    /// Another line of init.sh's (shown live).
    Lab,
    /// The kernel panicked.
    Panic,
    /// A kernel banner (`Linux version`): more than one is a reboot.
    Banner,
    /// Anything else.
    Other,
}

impl Line {
    /// What `text` is.
    pub fn of(text: &str) -> Line {
        if let Some(rest) = text.strip_prefix("lab: ") {
            if rest.starts_with("heartbeat") {
                return Line::Heartbeat;
            }
            if rest.starts_with("done") {
                return Line::Done;
            }
            if let Some(step) = rest.strip_prefix("step ") {
                if let Some((name, _)) = step.split_once(':') {
                    return Line::Step(name.to_string());
                }
            }
            return Line::Lab;
        }
        if text.contains("Kernel panic") {
            Line::Panic
        } else if text.contains("Linux version") {
            Line::Banner
        } else {
            Line::Other
        }
    }
}

/// Reads the lines appended to a console file since the last call.
pub struct Follower {
    path: PathBuf,
    pos: u64,
    partial: Vec<u8>,
}

impl Follower {
    /// Follows `path` from its start (it may not exist yet).
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            pos: 0,
            partial: Vec::new(),
        }
    }

    /// The complete lines written since the last call (without `\r\n`).
    pub fn poll(&mut self) -> Vec<String> {
        let Ok(mut f) = File::open(&self.path) else {
            return Vec::new();
        };
        // An emulator that opens its console file truncates it: start over.
        if f.metadata().is_ok_and(|m| m.len() < self.pos) {
            self.pos = 0;
            self.partial.clear();
        }
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(self.pos)).is_err() || f.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        self.pos += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        let mut lines = Vec::new();
        while let Some(i) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            let text = String::from_utf8_lossy(&line);
            lines.push(text.trim_end_matches(['\n', '\r']).to_string());
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_told_apart() {
        assert_eq!(Line::of("lab: heartbeat 40.12"), Line::Heartbeat);
        assert_eq!(
            Line::of("lab: step sweep: ipivmm sweep --irqchip kernel"),
            Line::Step("sweep".into())
        );
        assert_eq!(
            Line::of("lab: step sweep: rc=0 in 26s"),
            Line::Step("sweep".into())
        );
        assert_eq!(Line::of("lab: done"), Line::Done);
        assert_eq!(
            Line::of("lab: pass quick on 6.1.0-50-amd64, 2 CPUs"),
            Line::Lab
        );
        assert_eq!(
            Line::of("[   3.1] Kernel panic - not syncing: Attempted to kill init!"),
            Line::Panic
        );
        assert_eq!(
            Line::of("[    0.000000] Linux version 6.1.0-50-amd64"),
            Line::Banner
        );
        assert_eq!(Line::of(" lab: not at the start"), Line::Other);
    }

    #[test]
    fn only_complete_lines_come_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join("console.log");
        std::fs::write(&path, "lab: one\r\nlab: tw").unwrap();
        let mut f = Follower::new(path.clone());
        assert_eq!(f.poll(), ["lab: one"]);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, b"o\nrest").unwrap();
        assert_eq!(f.poll(), ["lab: two"]);
        assert!(f.poll().is_empty());
        std::fs::write(&path, "lab: again\n").unwrap();
        assert_eq!(
            f.poll(),
            ["lab: again"],
            "a truncated console is read from its start"
        );
    }
}
