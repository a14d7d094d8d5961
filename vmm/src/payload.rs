//! Placeholder until the payload build lands.
/// The built-in payload ELF.
pub const BUILTIN_PAYLOAD: &[u8] = &[];
