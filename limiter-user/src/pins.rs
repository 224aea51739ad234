//! The pin layout: `/sys/fs/bpf/limiter/<escaped cgroup path>/<map>`, root-only.
//!
//! Whoever can write a directory on the way to the pins can swap it for one of their own and
//! delete the links that keep enforcement attached. So every directory between the bpffs
//! mount and the pins must be root's, 0700 and not a symlink, and is checked before anything
//! is written or removed; and removing pins removes the agent's own names only.

use std::{
    fs::DirBuilder,
    os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use limiter_common::maps;
use nix::{
    mount::{mount, MsFlags},
    sys::statfs::{statfs, BPF_FS_MAGIC},
};

use crate::{
    attach::programs,
    cgroup::{escape_path, Cgroup},
};

pub const BPFFS: &str = "/sys/fs/bpf";
/// The empty directory that marks a pin directory as the agent's (bpffs names hold no dot).
const MARKER: &str = "made_by_limiter";
pub const ROOT: &str = "/sys/fs/bpf/limiter";

/// Makes sure a bpffs is mounted at /sys/fs/bpf, mounting one (root-only) when it is not.
pub fn ensure_bpffs() -> Result<()> {
    if is_bpffs(Path::new(BPFFS)) {
        return Ok(());
    }
    mount(
        Some("bpf"),
        BPFFS,
        Some("bpf"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0700"),
    )
    .with_context(|| {
        format!(
            "no bpffs at {BPFFS} and mounting one failed: run `mount -t bpf -o mode=0700 bpf {BPFFS}` as root"
        )
    })
}

fn is_bpffs(path: &Path) -> bool {
    statfs(path).is_ok_and(|fs| fs.filesystem_type() == BPF_FS_MAGIC)
}

/// One cgroup's pin directory.
#[derive(Debug, Clone)]
pub struct PinDir(PathBuf);

impl PinDir {
    pub fn for_cgroup(cgroup: &Cgroup) -> Result<Self> {
        Self::at(Path::new(ROOT).join(cgroup.escaped_name()))
    }

    /// A pin directory named on the command line: absolute, made of plain names.
    pub fn at(path: PathBuf) -> Result<Self> {
        use std::path::Component;
        if !path.is_absolute()
            || path
                .components()
                .any(|c| !matches!(c, Component::RootDir | Component::Normal(_)))
        {
            bail!(
                "pin directory {} must be an absolute path without `..`",
                path.display()
            );
        }
        Ok(PinDir(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn map(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Where links are pinned while no agent holds them (`--keep-attached`).
    pub fn links(&self) -> PathBuf {
        self.0.join("links")
    }

    /// The agent lock's name: every command that changes these pins takes the same lock.
    pub fn lock_name(&self) -> String {
        escape_path(&self.0.to_string_lossy())
    }

    /// Whether the directory exists; an error when it cannot be told (no permission).
    pub fn exists(&self) -> Result<bool> {
        match std::fs::symlink_metadata(&self.0) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => bail!(
                "permission denied reading {}: the pins are root-only, run this as root",
                self.0.display()
            ),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", self.0.display())),
        }
    }

    /// Creates the directory and any missing one above it on the bpffs, root-only, from
    /// the top down, checking each before going into it: whoever can read the pins can read
    /// limits, whoever can write them can change them. Marks it as the agent's.
    pub fn create(&self) -> Result<()> {
        for dir in self.below_mount()? {
            create_private(&dir)?;
        }
        create_private(&self.marker())
    }

    /// Creates the directory for the links of `--keep-attached`, root-only as the rest.
    pub fn create_links(&self) -> Result<()> {
        self.create()?;
        create_private(&self.links())
    }

    /// Made with the directory by [`PinDir::create`]: in a directory without it, pins under
    /// the agent's names (`config`, `stats`...) are another tool's.
    fn marker(&self) -> PathBuf {
        self.0.join(MARKER)
    }

    /// Removes the agent's own pins and, once empty, the directory; anything else in it
    /// stays. The objects live on while something holds them. A directory the agent did
    /// not make that holds pins under its names is refused, and nothing is removed.
    pub fn remove(&self) -> Result<()> {
        if !self.exists()? {
            return Ok(());
        }
        self.below_mount()?
            .iter()
            .try_for_each(|dir| check_private(dir))?;
        if !self.marker().exists() {
            let named_like_ours = maps::ALL.map(|name| self.map(name));
            if let Some(theirs) = named_like_ours
                .into_iter()
                .chain([self.links()])
                .find(|p| p.exists())
            {
                bail!(
                    "{} was not made by the limiter (another tool's pin?), so nothing was removed: pick another --pin-dir",
                    theirs.display()
                );
            }
        }
        let links = self.links();
        for name in programs() {
            remove_pin(&links.join(name))?;
        }
        remove_empty_dir(&links)?;
        for name in maps::ALL {
            remove_pin(&self.map(name))?;
        }
        remove_empty_dir(&self.marker())?;
        remove_empty_dir(&self.0)
    }

    /// Every directory from just below the bpffs mount down to this one; an error when
    /// the directory is not on a bpffs.
    fn below_mount(&self) -> Result<Vec<PathBuf>> {
        let not_bpffs = || {
            anyhow::anyhow!(
                "pin directory {} is not on a bpffs: pick a directory under {BPFFS}",
                self.0.display()
            )
        };
        let mut below = Vec::new();
        let mut dir = self.0.as_path();
        // Missing directories are created on the file system of the first existing one.
        while !dir.exists() {
            below.push(dir.to_path_buf());
            dir = dir.parent().ok_or_else(not_bpffs)?;
        }
        if !is_bpffs(dir) {
            return Err(not_bpffs());
        }
        while let Some(parent) = dir.parent().filter(|p| is_bpffs(p)) {
            below.push(dir.to_path_buf());
            dir = parent;
        }
        if below.is_empty() {
            bail!(
                "pin directory {} is a bpffs mount point: pick a directory below it",
                self.0.display()
            );
        }
        below.reverse();
        Ok(below)
    }

    /// Every pin directory under /sys/fs/bpf/limiter.
    pub fn all() -> Vec<PinDir> {
        let Ok(entries) = std::fs::read_dir(ROOT) else {
            return Vec::new();
        };
        let mut dirs: Vec<PinDir> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| PinDir(e.path()))
            .collect();
        dirs.sort_by(|a, b| a.0.cmp(&b.0));
        dirs
    }
}

/// Creates `dir` root-only, or checks the one there is.
fn create_private(dir: &Path) -> Result<()> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(e).with_context(|| format!("cannot create pin directory {}", dir.display()))
        }
        _ => check_private(dir),
    }
}

/// Refuses a directory that someone other than root could change or replace.
pub fn check_private(dir: &Path) -> Result<()> {
    let meta =
        std::fs::symlink_metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let mode = meta.permissions().mode() & 0o7777;
    if meta.file_type().is_symlink() || !meta.is_dir() || meta.uid() != 0 || mode & 0o077 != 0 {
        bail!(
            "{} must be a directory owned by root with mode 0700 (it is {}, owner uid {}, mode {mode:04o}): someone else could replace the pins; remove it and start again",
            dir.display(),
            if meta.file_type().is_symlink() { "a symlink" } else if meta.is_dir() { "a directory" } else { "not a directory" },
            meta.uid()
        );
    }
    Ok(())
}

fn remove_pin(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove pin {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Removes `dir` if it is empty; one holding something that is not ours stays.
fn remove_empty_dir(dir: &Path) -> Result<()> {
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
            tracing::warn!(
                dir = %dir.display(),
                "left in place: it holds pins that are not this agent's"
            );
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_directory_is_an_absolute_plain_path() {
        assert!(PinDir::at("/sys/fs/bpf/limiter/app".into()).is_ok());
        for bad in ["relative/dir", "/sys/fs/bpf/../../etc"] {
            assert!(PinDir::at(bad.into()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_directory_off_bpffs_is_refused_before_anything_is_touched() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("precious"), "x").unwrap();
        let pins = PinDir::at(dir.path().to_path_buf()).unwrap();
        let err = format!("{:#}", pins.remove().unwrap_err());
        assert!(err.contains("is not on a bpffs"), "{err}");
        let err = format!("{:#}", pins.create().unwrap_err());
        assert!(err.contains("is not on a bpffs"), "{err}");
        assert!(dir.path().join("precious").exists());
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = format!("{:#}", check_private(dir.path()).unwrap_err());
        assert!(err.contains("mode 0700"), "{err}");
    }
}
