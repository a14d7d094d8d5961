//! What to do about a KVM device this user may not open, from what the
//! host really has: the node's owner, group and mode, and whether that
//! group exists (many hosts have no `kvm` group, and /dev/kvm is
//! `root:root 0600`: "join the kvm group" is no fix there).
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The hint for a permission error on `device`.
pub fn hint(device: &Path) -> String {
    match std::fs::metadata(device) {
        Ok(m) => {
            let group = std::fs::read_to_string("/etc/group")
                .ok()
                .and_then(|t| name_of(&t, m.gid()));
            let owner = std::fs::read_to_string("/etc/passwd")
                .ok()
                .and_then(|t| name_of(&t, m.uid()));
            advice(
                device,
                owner.as_deref(),
                m.gid(),
                group.as_deref(),
                m.mode(),
            )
        }
        Err(e) => format!(
            "{} cannot be inspected ({e}); run as root",
            device.display()
        ),
    }
}

/// The name of id `id` in an `/etc/passwd` or `/etc/group` text (`name:x:id:...`).
fn name_of(table: &str, id: u32) -> Option<String> {
    table.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let _ = f.next()?;
        (f.next()?.parse::<u32>().ok()? == id).then(|| name.to_string())
    })
}

/// The advice for a node owned by `owner`, group `gid` (`group` by name,
/// if it has one) with permission bits `mode`.
fn advice(device: &Path, owner: Option<&str>, gid: u32, group: Option<&str>, mode: u32) -> String {
    let d = device.display();
    let owner = owner.unwrap_or("?");
    let group_shown = group.map_or_else(|| gid.to_string(), str::to_string);
    let here = format!("{d} is {owner}:{group_shown}, mode {:04o}", mode & 0o7777);
    let group_rw = mode & 0o060 == 0o060;
    match group {
        Some(g) if group_rw && g != "root" => format!(
            "{here}: add your user to the '{g}' group (usermod -aG {g} $USER, then log in again) or run as root"
        ),
        _ => format!(
            "{here}, so only {owner} can open it: run as root, or have root grant a group access (e.g. groupadd -r kvm; chgrp kvm {d}; chmod 0660 {d}; usermod -aG kvm $USER; a udev rule keeps it across reboots)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_follows_what_the_host_has() {
        let d = Path::new("/dev/kvm");
        let root_only = advice(d, Some("root"), 0, Some("root"), 0o20600);
        assert!(root_only.contains("root:root, mode 0600"), "{root_only}");
        assert!(root_only.contains("run as root") && !root_only.contains("add your user"));
        let group = advice(d, Some("root"), 108, Some("kvm"), 0o20660);
        assert!(
            group.contains("add your user to the 'kvm' group"),
            "{group}"
        );
        // A group id with no name: shown as the number, no group to join.
        let nameless = advice(d, Some("root"), 4242, None, 0o20660);
        assert!(nameless.contains("root:4242") && !nameless.contains("add your user"));
    }

    #[test]
    fn names_are_read_from_the_tables() {
        let t = "root:x:0:\nkvm:x:108:alice\n";
        assert_eq!(name_of(t, 108).as_deref(), Some("kvm"));
        assert_eq!(name_of(t, 7), None);
    }
}
