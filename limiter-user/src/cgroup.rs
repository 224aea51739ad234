//! The cgroup v2 directory the agent protects, and the names derived from it.

use std::{
    fs::File,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC};

/// A validated cgroup v2 directory.
#[derive(Debug, Clone)]
pub struct Cgroup {
    path: PathBuf,
    mount: PathBuf,
}

impl Cgroup {
    pub fn new(path: &Path) -> Result<Self> {
        let path = path.canonicalize().with_context(|| {
            format!(
                "cgroup {} does not exist: create it (mkdir) or pass the cgroup v2 directory of your service",
                path.display()
            )
        })?;
        if !path.is_dir() {
            bail!(
                "{} is not a directory: pass a cgroup v2 directory",
                path.display()
            );
        }
        let fs = statfs(&path).with_context(|| format!("cannot statfs {}", path.display()))?;
        if fs.filesystem_type() != CGROUP2_SUPER_MAGIC {
            let hint = mount_point()
                .map(|m| format!(" (cgroup v2 is mounted at {})", m.display()))
                .unwrap_or_else(|| " (no cgroup v2 file system is mounted)".into());
            bail!("{} is not a cgroup v2 directory{hint}", path.display());
        }
        let mount = mount_point()
            .filter(|m| path.starts_with(m))
            .with_context(|| {
                format!("cannot find the cgroup v2 mount holding {}", path.display())
            })?;
        if path == mount {
            bail!(
                "{} is the cgroup v2 root: it holds every process on the machine, this agent and sshd included; pass the cgroup of the processes to protect",
                path.display()
            );
        }
        Ok(Cgroup { path, mount })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn open(&self) -> Result<File> {
        File::open(&self.path)
            .with_context(|| format!("cannot open cgroup {}", self.path.display()))
    }

    /// The path below the cgroup v2 mount, escaped as systemd escapes paths in unit names
    /// ("/" -> "-", "-" -> "\x2d"), so distinct cgroups never share a name.
    pub fn escaped_name(&self) -> String {
        let rel = self.path.strip_prefix(&self.mount).unwrap_or(&self.path);
        escape_path(&rel.to_string_lossy())
    }

    /// The directory's inode, which changes when the cgroup is removed and created again;
    /// None while it does not exist.
    pub fn inode(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.path).ok().map(|m| m.ino())
    }

    /// Every process in the cgroup and its descendants.
    pub fn pids(&self) -> Result<Vec<i32>> {
        let mut pids = Vec::new();
        collect_pids(&self.path, &mut pids)?;
        Ok(pids)
    }
}

fn collect_pids(dir: &Path, pids: &mut Vec<i32>) -> Result<()> {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs"))
        .with_context(|| format!("cannot read {}/cgroup.procs", dir.display()))?;
    pids.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            collect_pids(&entry.path(), pids)?;
        }
    }
    Ok(())
}

pub fn escape_path(rel: &str) -> String {
    let trimmed = rel.trim_matches('/');
    if trimmed.is_empty() {
        return "-".into();
    }
    let mut out = String::with_capacity(trimmed.len());
    for c in trimmed.chars() {
        match c {
            '/' => out.push('-'),
            c if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':') => out.push(c),
            c => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\x{b:02x}"));
                }
            }
        }
    }
    out
}

/// The cgroup v2 mount point, read from /proc/mounts (hybrid layouts mount it at
/// /sys/fs/cgroup/unified, unified ones at /sys/fs/cgroup).
pub fn mount_point() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_, dir, fstype) = (fields.next()?, fields.next()?, fields.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(dir))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_systemd() {
        assert_eq!(escape_path("/app"), "app");
        assert_eq!(
            escape_path("system.slice/my-svc.service"),
            "system.slice-my\\x2dsvc.service"
        );
        assert_eq!(escape_path("/"), "-");
    }

    #[test]
    fn nested_and_dashed_names_do_not_collide() {
        assert_ne!(escape_path("a/b"), escape_path("a-b"));
    }
}
