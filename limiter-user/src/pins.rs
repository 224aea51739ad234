//! The pin layout: `/sys/fs/bpf/limiter/<escaped cgroup path>/<map>`, root-only.

use std::{
    fs::DirBuilder,
    os::unix::fs::DirBuilderExt,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use nix::{
    mount::{mount, MsFlags},
    sys::statfs::{statfs, BPF_FS_MAGIC},
};

use crate::cgroup::Cgroup;

pub const BPFFS: &str = "/sys/fs/bpf";
pub const ROOT: &str = "/sys/fs/bpf/limiter";

/// Makes sure a bpffs is mounted at /sys/fs/bpf, mounting one when it is not.
pub fn ensure_bpffs() -> Result<()> {
    if is_bpffs(Path::new(BPFFS)) {
        return Ok(());
    }
    mount(
        Some("bpf"),
        BPFFS,
        Some("bpf"),
        MsFlags::empty(),
        None::<&str>,
    )
    .with_context(|| {
        format!(
            "no bpffs at {BPFFS} and mounting one failed: run `mount -t bpf bpf {BPFFS}` as root"
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
    pub fn for_cgroup(cgroup: &Cgroup) -> Self {
        PinDir(Path::new(ROOT).join(cgroup.escaped_name()))
    }

    pub fn at(path: PathBuf) -> Self {
        PinDir(path)
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

    pub fn exists(&self) -> bool {
        self.0.exists()
    }

    /// Creates the directory (and /sys/fs/bpf/limiter) readable by root only: whoever can
    /// read the pins can read limits, whoever can write them can change them.
    pub fn create(&self) -> Result<()> {
        if !is_bpffs(self.0.parent().unwrap_or(Path::new(BPFFS))) && !is_bpffs(Path::new(BPFFS)) {
            bail!("{} is not on a bpffs", self.0.display());
        }
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.0)
            .with_context(|| format!("cannot create pin directory {}", self.0.display()))
    }

    /// Removes every pin and the directory; the objects live on while something holds them.
    pub fn remove(&self) -> Result<()> {
        match std::fs::remove_dir_all(&self.0) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot remove pins at {}", self.0.display()))
            }
            _ => Ok(()),
        }
    }

    /// Every pin directory under /sys/fs/bpf/limiter.
    pub fn all() -> Vec<PinDir> {
        let Ok(entries) = std::fs::read_dir(ROOT) else {
            return Vec::new();
        };
        let mut dirs: Vec<PinDir> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| PinDir(e.path()))
            .collect();
        dirs.sort_by(|a, b| a.0.cmp(&b.0));
        dirs
    }
}
