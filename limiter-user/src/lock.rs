//! One agent per pin directory: an exclusive lock on a file in a root-only directory. The
//! kernel releases it when the agent dies, so a file left behind does not block the next
//! agent; and nobody but root can open it to hold it.

use std::{
    fs::{DirBuilder, OpenOptions},
    io::{Read, Seek, Write},
    os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use nix::fcntl::{Flock, FlockArg};

use crate::pins::check_private;

const RUN_DIR: &str = "/run/limiter";

pub struct AgentLock {
    _file: Flock<std::fs::File>,
}

fn lock_path(name: &str) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{name}.lock"))
}

/// Creates /run/limiter root-only (tightening one an older version left 0755), then checks
/// it is root's and not a symlink.
fn private_run_dir() -> Result<()> {
    match DirBuilder::new().mode(0o700).create(RUN_DIR) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(e).with_context(|| format!("cannot create {RUN_DIR}"));
        }
        _ => {}
    }
    let meta = std::fs::symlink_metadata(RUN_DIR)?;
    if meta.is_dir() && std::os::unix::fs::MetadataExt::uid(&meta) == 0 {
        std::fs::set_permissions(RUN_DIR, std::fs::Permissions::from_mode(0o700))?;
    }
    check_private(Path::new(RUN_DIR))
}

impl AgentLock {
    /// Takes the lock for `name`, or says which process holds it.
    pub fn acquire(name: &str) -> Result<Self> {
        private_run_dir()?;
        let path = lock_path(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(f) => f,
            Err((mut file, _)) => {
                let mut pid = String::new();
                file.read_to_string(&mut pid).ok();
                bail!(
                    "another limiter agent (pid {}) already manages this cgroup: stop it first",
                    pid.trim()
                );
            }
        };
        file.set_len(0)?;
        file.rewind()?;
        write!(file, "{}", std::process::id())?;
        Ok(AgentLock { _file: file })
    }

    /// The pid of the agent holding the lock for `name`, if one is running.
    pub fn holder(name: &str) -> Option<u32> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(lock_path(name))
            .ok()?;
        match Flock::lock(file, FlockArg::LockSharedNonblock) {
            Ok(_) => None,
            Err((mut file, _)) => {
                let mut pid = String::new();
                file.read_to_string(&mut pid).ok();
                pid.trim().parse().ok()
            }
        }
    }
}
