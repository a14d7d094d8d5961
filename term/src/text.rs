//! Guest text made safe for a terminal: the one place where the host
//! escapes what a guest wrote before it can reach a person's screen (the
//! text of Done and Panic messages, the serial console's log lines).
//!
//! Every control character but tab (C0, DEL and C1: `char::is_control`)
//! becomes its Rust escape (`\u{1b}`, `\r`, `\n`), so a guest cannot move
//! the cursor, erase lines, change colours or hide text; the rest is kept
//! as is. Phase and record names need none of this: the control port
//! refuses names with control characters.

/// `s` with its control characters (tab excepted) escaped.
///
/// ```
/// use ipivmm_term::text::escape_controls;
///
/// assert_eq!(escape_controls("ok\tfine"), "ok\tfine");
/// assert_eq!(escape_controls("\r\x1b[2K\n"), "\\r\\u{1b}[2K\\n");
/// assert_eq!(escape_controls("\u{9b}31m"), "\\u{9b}31m"); // C1 CSI
/// ```
pub fn escape_controls(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
