//! Settings: `module.param=value` lists and sweep dimensions, and values
//! compared the way the kernel parses them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::facts::parse_bool_param;

/// Longest parameter value accepted from the command line.
pub(super) const MAX_VALUE_LEN: usize = 256;

/// One `module.param=value` setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleSetting {
    /// Module name, `-` normalised to `_` (e.g. `kvm_amd`).
    pub module: String,
    /// Parameter name, `-` normalised to `_` (e.g. `avic`).
    pub param: String,
    /// Value as given (e.g. `1`, `N`, `on`).
    pub value: String,
}

impl fmt::Display for ModuleSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}={}", self.module, self.param, self.value)
    }
}

/// Errors of parsing settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Nothing given.
    #[error("no module settings given: pass e.g. kvm_amd.avic=1")]
    Empty,
    /// An empty item between commas.
    #[error("empty item {index} in {list:?}: separate settings with single commas, e.g. kvm_intel.enable_apicv=N,kvm_intel.enable_ipiv=0")]
    EmptyItem {
        /// 1-based position.
        index: usize,
        /// The whole list.
        list: String,
    },
    /// Not `module.param=value`.
    #[error("{item:?} is not module.param=value: write e.g. kvm_amd.avic=1")]
    Garbled {
        /// The item.
        item: String,
    },
    /// A module or parameter name with characters outside `[A-Za-z0-9_-]`.
    #[error("{item:?}: bad {what} name {name:?}: use letters, digits, '_' or '-' (e.g. kvm_intel.enable_ipiv=0)")]
    BadName {
        /// The item.
        item: String,
        /// `module` or `parameter`.
        what: &'static str,
        /// The offending name.
        name: String,
    },
    /// An empty, too long, or unquotable value.
    #[error("{item:?}: bad value {value:?}: give a plain value without spaces, quotes, commas or '=' (e.g. 0, 1, Y, N)")]
    BadValue {
        /// The item.
        item: String,
        /// The offending value.
        value: String,
    },
    /// The same parameter twice.
    #[error("{key} is given twice: keep one value per parameter")]
    Duplicate {
        /// `module.param`.
        key: String,
    },
}

/// Normalises a module or parameter name (`-` to `_`, as the kernel's
/// `parameq` and modprobe do) and checks its characters.
fn normalise_name(item: &str, what: &'static str, name: &str) -> Result<String, ParseError> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !ok {
        return Err(ParseError::BadName {
            item: item.to_string(),
            what,
            name: name.to_string(),
        });
    }
    Ok(name.replace('-', "_"))
}

/// Checks a value: non-empty, short, and passable as one modprobe argument
/// (the kernel splits `init_module` arguments at spaces unless quoted).
fn check_value(item: &str, value: &str) -> Result<String, ParseError> {
    let bad = |c: char| c.is_whitespace() || c.is_control() || "\"'=,".contains(c);
    if value.is_empty() || value.len() > MAX_VALUE_LEN || value.chars().any(bad) {
        return Err(ParseError::BadValue {
            item: item.to_string(),
            value: value.to_string(),
        });
    }
    Ok(value.to_string())
}

impl FromStr for ModuleSetting {
    type Err = ParseError;

    /// Parses one `module.param=value` item (surrounding spaces ignored).
    fn from_str(item: &str) -> Result<Self, ParseError> {
        let item = item.trim();
        let garbled = || ParseError::Garbled {
            item: item.to_string(),
        };
        let (key, value) = item.split_once('=').ok_or_else(garbled)?;
        let (module, param) = key.trim().split_once('.').ok_or_else(garbled)?;
        Ok(ModuleSetting {
            module: normalise_name(item, "module", module)?,
            param: normalise_name(item, "parameter", param)?,
            value: check_value(item, value.trim())?,
        })
    }
}

/// Parses a comma-separated settings list such as
/// `kvm_intel.enable_apicv=N,kvm_intel.enable_ipiv=0,kvm_amd.avic=1`.
///
/// Refuses an empty list, empty items, items that are not
/// `module.param=value`, bad names or values, and a parameter given twice.
pub fn parse_settings(list: &str) -> Result<Vec<ModuleSetting>, ParseError> {
    if list.trim().is_empty() {
        return Err(ParseError::Empty);
    }
    let mut out: Vec<ModuleSetting> = Vec::new();
    for (i, item) in list.split(',').enumerate() {
        if item.trim().is_empty() {
            return Err(ParseError::EmptyItem {
                index: i + 1,
                list: list.to_string(),
            });
        }
        let s: ModuleSetting = item.parse()?;
        if out
            .iter()
            .any(|o| o.module == s.module && o.param == s.param)
        {
            return Err(ParseError::Duplicate {
                key: format!("{}.{}", s.module, s.param),
            });
        }
        out.push(s);
    }
    Ok(out)
}

/// Parses a sweep dimension `module.param=v1,v2,...` (e.g.
/// `kvm_amd.avic=0,1`) into one setting per value, in order.
///
/// Refuses empty values and two values that mean the same (`1,Y`).
pub fn parse_param_values(spec: &str) -> Result<Vec<ModuleSetting>, ParseError> {
    if spec.trim().is_empty() {
        return Err(ParseError::Empty);
    }
    let (key, values) = spec.split_once('=').ok_or_else(|| ParseError::Garbled {
        item: spec.trim().to_string(),
    })?;
    let mut out: Vec<ModuleSetting> = Vec::new();
    for (i, v) in values.split(',').enumerate() {
        if v.trim().is_empty() {
            return Err(ParseError::EmptyItem {
                index: i + 1,
                list: spec.to_string(),
            });
        }
        let s: ModuleSetting = format!("{}={}", key.trim(), v.trim()).parse()?;
        if out.iter().any(|o| param_values_equal(&o.value, &s.value)) {
            return Err(ParseError::Duplicate { key: s.to_string() });
        }
        out.push(s);
    }
    Ok(out)
}

/// Parses a boolean the way the kernel's `param_set_bool` (`kstrtobool`)
/// accepts it: `Y`/`N`/`1`/`0` (any case) and `on`/`off`, `yes`/`no`,
/// `true`/`false`.
pub fn parse_kernel_bool(s: &str) -> Option<bool> {
    if let Some(b) = parse_bool_param(s) {
        return Some(b);
    }
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "yes" | "true" => Some(true),
        "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// Parses an integer the way the kernel's `param_set_int`/`uint`/`ulong`
/// (`kstrto*(s, 0, ...)`) does: decimal, `0x` hexadecimal, leading-`0`
/// octal, optional sign. Sysfs prints integers in decimal.
pub fn parse_kernel_int(s: &str) -> Option<i128> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if body.is_empty() || body.starts_with(['+', '-']) {
        return None;
    }
    let (digits, radix) = match body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None if body.len() > 1 && body.starts_with('0') => (&body[1..], 8),
        None => (body, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = i128::from_str_radix(digits, radix).ok()?;
    Some(if neg { -v } else { v })
}

/// Whether a requested value and a value read back from sysfs mean the
/// same: equal strings, equal integers (`0x10` vs `16`), or equal booleans
/// (`1` vs `Y`, `off` vs `N`).
pub fn param_values_equal(requested: &str, read_back: &str) -> bool {
    let (a, b) = (requested.trim(), read_back.trim());
    if a == b {
        return true;
    }
    if let (Some(x), Some(y)) = (parse_kernel_int(a), parse_kernel_int(b)) {
        return x == y;
    }
    matches!(
        (parse_kernel_bool(a), parse_kernel_bool(b)),
        (Some(x), Some(y)) if x == y
    )
}
