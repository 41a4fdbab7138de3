//! Where a path of the file system is also reachable through another
//! mount (a bind mount of the project or of a folder above it), read from
//! `/proc/self/mountinfo`: the sandbox excludes those paths too. Depends
//! on std only.

use std::path::{Path, PathBuf};

/// The other paths under which `path` (canonical) is reachable through the
/// mounts of `mountinfo` (`/proc/self/mountinfo`): where a mount of the
/// same file system shows a folder above it (the alias of `path` beneath
/// that mount), or a folder beneath it (that whole mount).
pub(super) fn aliases(mountinfo: &str, path: &Path) -> Vec<PathBuf> {
    struct Mount {
        device: String,
        root: PathBuf,
        point: PathBuf,
    }
    // Fields: id, parent, major:minor, root, mount point, ... (octal
    // escapes such as `\040` for a space in the paths).
    let unescape = |field: &str| -> PathBuf {
        let bytes = field.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let octal = bytes.get(i + 1..i + 4).and_then(|d| {
                let text = std::str::from_utf8(d).ok()?;
                u8::from_str_radix(text, 8).ok()
            });
            match (bytes[i], octal) {
                (b'\\', Some(byte)) => {
                    out.push(byte);
                    i += 4;
                }
                (byte, _) => {
                    out.push(byte);
                    i += 1;
                }
            }
        }
        PathBuf::from(std::ffi::OsString::from(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&out),
        ))
    };
    let mounts: Vec<Mount> = mountinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let device = fields.nth(2)?.to_string();
            let root = unescape(fields.next()?);
            let point = unescape(fields.next()?);
            Some(Mount {
                device,
                root,
                point,
            })
        })
        .collect();
    // The mount `path` is seen through: the last listed of those whose
    // point is the longest prefix of it (a later mount covers an earlier).
    let Some(home) = mounts
        .iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
    else {
        return Vec::new();
    };
    let Ok(inside) = path.strip_prefix(&home.point) else {
        return Vec::new();
    };
    let in_fs = home.root.join(inside);
    let mut aliases = Vec::new();
    for mount in mounts.iter().filter(|m| m.device == home.device) {
        if let Ok(rest) = in_fs.strip_prefix(&mount.root) {
            let alias = mount.point.join(rest);
            if alias != path {
                aliases.push(alias);
            }
        } else if mount.root.starts_with(&in_fs) && mount.point != path {
            aliases.push(mount.point.clone());
        }
    }
    aliases
}

#[cfg(test)]
mod tests {
    use super::aliases;
    use std::path::{Path, PathBuf};

    const MOUNTINFO: &str = "\
22 1 252:1 / / rw,relatime - ext4 /dev/vda rw
30 22 252:1 /home/u /srv/u rw,relatime - ext4 /dev/vda rw
31 22 252:1 /home/u/proj/data /mnt/data rw,relatime - ext4 /dev/vda rw
32 22 0:40 / /tmp rw - tmpfs tmpfs rw
33 22 252:1 /home/u/with\\040space /opt/x rw - ext4 /dev/vda rw";

    #[test]
    fn a_bind_mount_above_or_below_a_path_is_an_alias() {
        let found = aliases(MOUNTINFO, Path::new("/home/u/proj"));
        assert_eq!(
            found,
            vec![PathBuf::from("/srv/u/proj"), PathBuf::from("/mnt/data")]
        );
        assert!(aliases(MOUNTINFO, Path::new("/tmp/x")).is_empty());
        assert_eq!(
            aliases(MOUNTINFO, Path::new("/home/u/with space/p")),
            vec![
                PathBuf::from("/srv/u/with space/p"),
                PathBuf::from("/opt/x/p")
            ]
        );
    }
}
