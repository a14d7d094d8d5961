//! The control-message ABI for C: [`write`] renders `guest-linux/ipivmm-abi.h`
//! (the Linux guest's phase tool includes it) from this crate's own
//! definitions, so the C side cannot restate the layout by hand.
//!
//! The struct fields come from the Rust structs (their types through
//! [`CType`], their order by `offset_of!`), the kinds from
//! [`MsgKind::from_raw`], the counters from [`GuestCounters::ALL`]; the
//! header ends with a `_Static_assert` per field offset and struct size, so
//! a C compiler that lays it out otherwise refuses it. `cargo xtask
//! abi-header` writes the file; `abi/tests/c_header.rs` checks that the
//! committed one is this output and that `cc` accepts it.
use crate::{
    phase_flags, ControlMsg, GuestCounters, MsgKind, ABI_VERSION, CONTROL_MAGIC, CONTROL_MSG_SIZE,
    CONTROL_PORT, MAX_NAME_LEN, MAX_SAMPLES_PER_MSG, MAX_TEXT_LEN, REPLY_OK, REPLY_REJECTED,
    UNIT_TSC_CYCLES,
};
use core::fmt::{Result, Write};
use core::mem::{offset_of, size_of};

/// Where the header lives, from the workspace root.
pub const PATH: &str = "guest-linux/ipivmm-abi.h";

/// A Rust field type and its C spelling.
pub trait CType {
    /// Writes the C declaration of a field `name` of this type.
    fn declare(out: &mut dyn Write, name: &str) -> Result;
}

macro_rules! c_scalar {
    ($($rust:ty => $c:literal),+) => {$(
        impl CType for $rust {
            fn declare(out: &mut dyn Write, name: &str) -> Result {
                write!(out, "{} {name}", $c)
            }
        }
    )+};
}
c_scalar!(u16 => "uint16_t", u32 => "uint32_t", u64 => "uint64_t",
    GuestCounters => "struct ipivmm_guest_counters");

impl<T: CType, const N: usize> CType for [T; N] {
    fn declare(out: &mut dyn Write, name: &str) -> Result {
        T::declare(out, name)?;
        write!(out, "[{N}]")
    }
}

/// One field of a C struct: its name, offset and declaration.
#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    offset: usize,
    declare: fn(&mut dyn Write, &str) -> Result,
}

/// The [`CType`] of the field `get` reads (type inference picks it).
fn declare_of<S, T: CType>(_get: fn(&S) -> &T) -> fn(&mut dyn Write, &str) -> Result {
    T::declare
}

macro_rules! fields {
    ($s:ident { $($f:ident),+ $(,)? }) => {{
        // A field added to the struct and not listed here is a compile error.
        let _exhaustive = |v: $s| {
            let $s { $($f: _),+ } = v;
        };
        [$(Field {
            name: stringify!($f),
            offset: offset_of!($s, $f),
            declare: declare_of(|v: &$s| &v.$f),
        }),+]
    }};
}

fn control_msg() -> [Field; 9] {
    let mut f = fields!(ControlMsg {
        magic,
        version,
        kind,
        vcpu,
        phase,
        arg,
        counters,
        reply,
        reserved
    });
    f.sort_unstable_by_key(|f| f.offset);
    f
}

/// `PhaseBegin` as `PHASE_BEGIN`.
struct Shout<'a>(&'a str);

impl core::fmt::Display for Shout<'_> {
    fn fmt(&self, out: &mut core::fmt::Formatter<'_>) -> Result {
        for (i, c) in self.0.char_indices() {
            if c.is_ascii_uppercase() && i > 0 {
                out.write_char('_')?;
            }
            out.write_char(c.to_ascii_uppercase())?;
        }
        Ok(())
    }
}

/// The C struct `name` with `fields` (in offset order), then its
/// offset and size assertions.
fn write_struct(out: &mut dyn Write, name: &str, size: usize, fields: &[Field]) -> Result {
    writeln!(out, "struct {name} {{")?;
    for f in fields {
        out.write_char('\t')?;
        (f.declare)(out, f.name)?;
        writeln!(out, ";")?;
    }
    writeln!(out, "}};")?;
    for f in fields {
        writeln!(
            out,
            "_Static_assert(offsetof(struct {name}, {0}) == {1}, \"{name}.{0} at {1}\");",
            f.name, f.offset
        )?;
    }
    writeln!(
        out,
        "_Static_assert(sizeof(struct {name}) == {size}, \"{name} is {size} bytes\");"
    )
}

/// Writes the header: constants, kinds, `struct ipivmm_guest_counters` and
/// `struct ipivmm_control_msg`, each layout checked by the compiler.
pub fn write(out: &mut dyn Write) -> Result {
    for line in [
        "/* ipivmm-abi.h: the control-message ABI of ipivmm (docs/guest-abi.md) for C.",
        " * Generated from abi/src (ipivmm_abi::c_header) by `cargo xtask abi-header`:",
        " * do not edit. abi/tests/c_header.rs checks that this is the generated",
        " * file and that a C compiler lays it out as Rust does. */",
        "#ifndef IPIVMM_ABI_H",
        "#define IPIVMM_ABI_H",
        "",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
    ] {
        writeln!(out, "{line}")?;
    }
    for (name, value) in [
        ("ABI_VERSION", u64::from(ABI_VERSION)),
        ("CONTROL_PORT", u64::from(CONTROL_PORT)),
        ("CONTROL_MSG_SIZE", CONTROL_MSG_SIZE as u64),
    ] {
        writeln!(out, "#define IPIVMM_{name} {value:#x}")?;
    }
    writeln!(out, "#define IPIVMM_CONTROL_MAGIC {CONTROL_MAGIC:#x}u")?;
    for (name, value) in [
        ("MAX_NAME_LEN", MAX_NAME_LEN),
        ("MAX_TEXT_LEN", MAX_TEXT_LEN),
        ("MAX_SAMPLES_PER_MSG", MAX_SAMPLES_PER_MSG),
        ("UNIT_TSC_CYCLES", UNIT_TSC_CYCLES),
        ("REPLY_OK", REPLY_OK),
        ("REPLY_REJECTED", REPLY_REJECTED),
        ("PHASE_UNCOUNTED", phase_flags::UNCOUNTED),
    ] {
        writeln!(out, "#define IPIVMM_{name} UINT64_C({value:#x})")?;
    }
    writeln!(out, "\nenum ipivmm_msg_kind {{")?;
    for raw in 0..=u16::MAX {
        if let Some(kind) = MsgKind::from_raw(raw) {
            let mut name = Name::new();
            write!(name, "{kind:?}")?;
            writeln!(out, "\tIPIVMM_MSG_{} = {raw},", Shout(name.as_str()))?;
        }
    }
    writeln!(out, "}};\n")?;
    let counters = GuestCounters::ALL.map(|c| Field {
        name: c.name,
        offset: c.offset,
        declare: u64::declare,
    });
    write_struct(
        out,
        "ipivmm_guest_counters",
        size_of::<GuestCounters>(),
        &counters,
    )?;
    writeln!(out)?;
    write_struct(
        out,
        "ipivmm_control_msg",
        size_of::<ControlMsg>(),
        &control_msg(),
    )?;
    writeln!(out, "\n#endif")
}

/// A short name on the stack (a [`MsgKind`]'s `Debug`; no allocator here).
struct Name {
    buf: [u8; 32],
    len: usize,
}

impl Name {
    fn new() -> Self {
        Self {
            buf: [0; 32],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("?")
    }
}

impl Write for Name {
    fn write_str(&mut self, s: &str) -> Result {
        let end = self.len + s.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(core::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
