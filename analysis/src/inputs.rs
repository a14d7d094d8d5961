//! Reading the files a user names (a payload, recorded results) without
//! trusting them: regular files only, opened without blocking (a FIFO given
//! by mistake is refused instead of hanging the run), and never more than a
//! size bound into memory. Errors are one line without the file's name (the
//! caller names it).
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a named input cannot be used: one line, without the file name (the
/// caller prefixes it).
fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading without blocking and checks it is a regular
/// file of at most `max` bytes.
fn open_regular(path: &Path, max: u64) -> Result<(File, u64), String> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(format!("it is {}, not a regular file", kind_of(&meta)));
    }
    if meta.len() > max {
        return Err(format!(
            "too large: {} bytes, at most {max} are read",
            meta.len()
        ));
    }
    Ok((f, meta.len()))
}

/// The bytes of regular file `path`, at most `max` of them.
pub fn read_bytes(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let (f, len) = open_regular(path, max)?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(len as usize)
        .map_err(|e| e.to_string())?;
    // The file may grow after the check: never read past the bound.
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!(
            "too large: it grew past {max} bytes while being read"
        ));
    }
    Ok(bytes)
}

/// The text of regular file `path`, at most `max` bytes of UTF-8.
pub(crate) fn read_text(path: &Path, max: u64) -> Result<String, String> {
    String::from_utf8(read_bytes(path, max)?).map_err(|_| "not UTF-8 text".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_devices_and_directories_are_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("ipivmm-inputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_bytes(&fifo, 10).unwrap_err();
        assert!(e.contains("a FIFO"), "{e}");
        assert!(read_bytes(Path::new("/dev/zero"), 10)
            .unwrap_err()
            .contains("a device"));
        assert!(read_bytes(&dir, 10).unwrap_err().contains("a directory"));
        let big = dir.join("big");
        std::fs::write(&big, [0u8; 11]).unwrap();
        assert!(read_bytes(&big, 10)
            .unwrap_err()
            .contains("too large: 11 bytes"));
        assert_eq!(read_bytes(&big, 11).unwrap().len(), 11);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
