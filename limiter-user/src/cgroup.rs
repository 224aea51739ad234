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
    /// A cgroup v2 directory to protect: any but the root, which holds every process on
    /// the machine.
    pub fn new(path: &Path) -> Result<Self> {
        let cgroup = Cgroup::locate(path)?;
        // By identity, not by path: the root bind-mounted elsewhere is still the root.
        if same_directory(&cgroup.path, &cgroup.mount)? {
            bail!(
                "{} is the cgroup v2 root: it holds every process on the machine, this agent and sshd included; pass the cgroup of the processes to protect, a directory below it",
                path.display()
            );
        }
        Ok(cgroup)
    }

    /// Any cgroup v2 directory, the root included.
    fn locate(path: &Path) -> Result<Self> {
        let mount = mount_point();
        let Ok(canonical) = path.canonicalize() else {
            bail!(
                "cgroup {} does not exist; {}",
                path.display(),
                instead(path, mount.as_deref(), "create it (mkdir)")
            );
        };
        if !canonical.is_dir() {
            bail!(
                "{} is not a directory; {}",
                path.display(),
                instead(path, mount.as_deref(), "pass a directory below it")
            );
        }
        let fs = statfs(&canonical).with_context(|| format!("cannot statfs {}", path.display()))?;
        let holding = mount
            .as_ref()
            .filter(|m| fs.filesystem_type() == CGROUP2_SUPER_MAGIC && canonical.starts_with(m));
        let Some(holding) = holding.cloned() else {
            bail!(
                "{} is not a cgroup v2 directory; {}",
                path.display(),
                instead(path, mount.as_deref(), "pass a directory below it")
            );
        };
        Ok(Cgroup {
            path: canonical,
            mount: holding,
        })
    }

    /// Creates `name` below `parent` (a cgroup v2 directory).
    pub fn create_below(parent: &Path, name: &str) -> Result<Self> {
        let parent = Cgroup::locate(parent)?;
        let path = parent.path.join(name);
        std::fs::create_dir(&path)
            .with_context(|| format!("cannot create cgroup {}", path.display()))?;
        Cgroup::new(&path)
    }

    /// True while a process is in the cgroup or below it.
    pub fn populated(&self) -> Result<bool> {
        let events = self.path.join("cgroup.events");
        let text = std::fs::read_to_string(&events)
            .with_context(|| format!("cannot read {}", events.display()))?;
        Ok(text.lines().any(|l| l == "populated 1"))
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

    /// The name of the lock that keeps a second agent off this cgroup. Escaped names hold
    /// no dot, so it is no pin directory's lock name.
    pub fn lock_name(&self) -> String {
        format!("{}.cgroup", self.escaped_name())
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

fn same_directory(a: &Path, b: &Path) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| (m.dev(), m.ino()))
            .with_context(|| format!("cannot read {}", p.display()))
    };
    Ok(id(a)? == id(b)?)
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

/// systemd's escaping of a path into one name (`/` to `-`, others as `\xNN`), with one
/// difference: `.` is escaped too, because bpffs refuses names holding a dot (EPERM, kept
/// for its own special files), and systemd's cgroups are all named `*.slice` or `*.service`.
pub fn escape_path(rel: &str) -> String {
    let trimmed = rel.trim_matches('/');
    if trimmed.is_empty() {
        return "-".into();
    }
    let mut out = String::with_capacity(trimmed.len());
    for c in trimmed.chars() {
        match c {
            '/' => out.push('-'),
            c if c.is_ascii_alphanumeric() || matches!(c, '_' | ':') => out.push(c),
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
    procfs::mounts()
        .ok()?
        .into_iter()
        .find(|m| m.fs_vfstype == "cgroup2")
        .map(|m| PathBuf::from(m.fs_file))
}

/// The second half of every message about a wrong cgroup path: where cgroup v2 is on this
/// machine, and what to pass instead of `path`.
pub fn instead(path: &Path, mount: Option<&Path>, fix: &str) -> String {
    const EXEC: &str = "or start the program under the limiter with `limiter-user exec -- CMD`";
    let Some(mount) = mount else {
        return format!(
            "no cgroup v2 file system is mounted on this machine: mount one (`mount -t cgroup2 none /sys/fs/cgroup`), {EXEC}"
        );
    };
    let suggestion = suggest(path, mount);
    if suggestion == path {
        return format!(
            "cgroup v2 is mounted at {} on this machine: {fix}, {EXEC}",
            mount.display()
        );
    }
    format!(
        "cgroup v2 is mounted at {} on this machine: pass {} (create it with mkdir), {EXEC}",
        mount.display(),
        suggestion.display()
    )
}

/// The cgroup v2 directory a user most likely meant: the same path below the real mount
/// (`/sys/fs/cgroup/app` on a hybrid layout is `/sys/fs/cgroup/unified/app`).
fn suggest(path: &Path, mount: &Path) -> PathBuf {
    if path.starts_with(mount) {
        return path.to_path_buf();
    }
    let rel = path
        .strip_prefix("/sys/fs/cgroup")
        .ok()
        .filter(|rel| !rel.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .or_else(|| path.file_name().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("app"));
    mount.join(rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_systemd() {
        assert_eq!(escape_path("/app"), "app");
        assert_eq!(
            escape_path("system.slice/my-svc.service"),
            "system\\x2eslice-my\\x2dsvc\\x2eservice"
        );
        assert_eq!(escape_path("/"), "-");
    }

    #[test]
    fn a_path_beside_the_mount_gets_the_path_below_it() {
        let hybrid = Path::new("/sys/fs/cgroup/unified");
        let message = instead(Path::new("/sys/fs/cgroup/app"), Some(hybrid), "create it");
        assert!(
            message.contains("mounted at /sys/fs/cgroup/unified")
                && message.contains("pass /sys/fs/cgroup/unified/app"),
            "{message}"
        );
        let message = instead(Path::new("/tmp"), Some(hybrid), "create it");
        assert!(
            message.contains("pass /sys/fs/cgroup/unified/tmp"),
            "{message}"
        );
    }

    #[test]
    fn a_missing_path_below_the_mount_is_to_be_created() {
        let unified = Path::new("/sys/fs/cgroup");
        let message = instead(
            Path::new("/sys/fs/cgroup/app"),
            Some(unified),
            "create it (mkdir)",
        );
        assert!(
            message.contains("mounted at /sys/fs/cgroup on this machine: create it (mkdir)"),
            "{message}"
        );
        assert!(message.contains("limiter-user exec -- CMD"), "{message}");
    }

    #[test]
    fn no_mount_says_how_to_mount_one() {
        let message = instead(Path::new("/sys/fs/cgroup/app"), None, "create it");
        assert!(message.contains("mount -t cgroup2"), "{message}");
    }

    #[test]
    fn nested_and_dashed_names_do_not_collide() {
        assert_ne!(escape_path("a/b"), escape_path("a-b"));
    }
}
