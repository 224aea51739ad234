//! One agent per cgroup: an exclusive lock file, released by the kernel when the agent dies.

use std::{
    fs::OpenOptions,
    io::{Read, Seek, Write},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use nix::fcntl::{Flock, FlockArg};

pub const RUN_DIR: &str = "/run/limiter";

pub struct AgentLock {
    _file: Flock<std::fs::File>,
    path: PathBuf,
}

pub fn lock_path(name: &str) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{name}.lock"))
}

impl AgentLock {
    /// Takes the lock for `name`, or says which process holds it.
    pub fn acquire(name: &str) -> Result<Self> {
        std::fs::create_dir_all(RUN_DIR).with_context(|| format!("cannot create {RUN_DIR}"))?;
        let path = lock_path(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
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
        Ok(AgentLock { _file: file, path })
    }

    /// The pid of the agent holding the lock for `name`, if one is running.
    pub fn holder(name: &str) -> Option<String> {
        let file = OpenOptions::new().read(true).open(lock_path(name)).ok()?;
        match Flock::lock(file, FlockArg::LockSharedNonblock) {
            Ok(_) => None,
            Err((mut file, _)) => {
                let mut pid = String::new();
                file.read_to_string(&mut pid).ok();
                Some(pid.trim().to_string())
            }
        }
    }
}

impl Drop for AgentLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
