//! One agent per cgroup and per pin directory: an exclusive lock on a file in a root-only
//! directory, for each. The kernel releases a lock when its agent dies, so a file left
//! behind does not block the next agent; nobody but root can open one to hold it. A lock
//! file holds its agent's pid, then the other files the agent keeps in /run/limiter: an
//! agent removes them when it stops, and the next agent to start removes those of killed
//! ones.

use std::{
    fs::{DirBuilder, File, OpenOptions},
    io::{Read, Seek, Write},
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use nix::fcntl::{Flock, FlockArg};

use crate::pins::check_private;

pub const RUN_DIR: &str = "/run/limiter";

/// Attempts at taking a lock whose file is being replaced meanwhile.
const ATTEMPTS: usize = 8;

/// A held lock; dropping it removes its file, then releases it.
pub struct AgentLock {
    path: PathBuf,
    _file: Flock<File>,
}

fn lock_path(name: &str) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{name}.lock"))
}

/// Creates /run/limiter root-only (tightening one an older version left 0755), then checks
/// it is root's and not a symlink.
pub fn private_run_dir() -> Result<()> {
    match DirBuilder::new().mode(0o700).create(RUN_DIR) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(e).with_context(|| format!("cannot create {RUN_DIR}"));
        }
        _ => {}
    }
    let meta = std::fs::symlink_metadata(RUN_DIR)?;
    if meta.is_dir() && meta.uid() == 0 {
        std::fs::set_permissions(RUN_DIR, std::fs::Permissions::from_mode(0o700))?;
    }
    check_private(Path::new(RUN_DIR))
}

/// What taking a lock found.
enum Taken {
    Held(AgentLock),
    /// By a running process, whose pid the file holds.
    Busy(String),
}

/// Takes the lock `name` (creating its file only with `create`). A file removed or replaced
/// between opening and locking it was a stopping agent's: it is opened again.
fn take(name: &str, create: bool) -> Result<Taken> {
    let path = lock_path(name);
    for _ in 0..ATTEMPTS {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(file) if still_at(&path, &file) => {
                return Ok(Taken::Held(AgentLock { path, _file: file }));
            }
            Err((mut file, _)) if still_at(&path, &file) => {
                return Ok(Taken::Busy(pid_in(&read(&mut file)).to_string()));
            }
            _ => {}
        }
    }
    bail!("cannot lock {}: it keeps being replaced", path.display())
}

/// Whether `path` is still the file `file` was opened from.
fn still_at(path: &Path, file: &File) -> bool {
    match (std::fs::symlink_metadata(path), file.metadata()) {
        (Ok(at), Ok(held)) => (at.dev(), at.ino()) == (held.dev(), held.ino()),
        _ => false,
    }
}

impl AgentLock {
    /// Takes the lock `name`, or says which process holds it and that it already `does`
    /// (what the lock stands for: "manages this cgroup").
    pub fn acquire(name: &str, does: &str) -> Result<Self> {
        private_run_dir()?;
        match take(name, true)? {
            Taken::Held(mut lock) => {
                let file = &mut lock._file;
                file.set_len(0)?;
                file.rewind()?;
                write!(file, "{}", std::process::id())?;
                Ok(lock)
            }
            Taken::Busy(pid) => {
                bail!("another limiter agent (pid {pid}) already {does}: stop it first")
            }
        }
    }

    /// Records another file of the agent's in /run/limiter, removed with the lock's file
    /// should the agent be killed.
    pub fn also_owns(&mut self, path: &Path) -> Result<()> {
        self._file.seek(std::io::SeekFrom::End(0))?;
        writeln!(self._file)?;
        self._file.write_all(path.as_os_str().as_encoded_bytes())?;
        Ok(())
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
            Err((mut file, _)) => pid_in(&read(&mut file)).parse().ok(),
        }
    }
}

fn read(file: &mut File) -> String {
    let mut text = String::new();
    file.read_to_string(&mut text).ok();
    text
}

/// The pid on a lock file's first line.
fn pid_in(text: &str) -> &str {
    text.lines().next().unwrap_or_default().trim()
}

impl Drop for AgentLock {
    fn drop(&mut self) {
        // Removed while still held: nobody can take a lock on the file once it is gone.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Removes what agents that were killed left in /run/limiter: lock files no process
/// holds, and the files they list.
pub fn remove_stale() {
    let Ok(entries) = std::fs::read_dir(RUN_DIR) else {
        return;
    };
    let names = entries.filter_map(|e| e.ok()?.file_name().into_string().ok());
    for stem in names.filter_map(|n| Some(n.strip_suffix(".lock")?.to_string())) {
        if let Ok(Taken::Held(mut lock)) = take(&stem, false) {
            lock._file.rewind().ok();
            let listed = read(&mut lock._file);
            for file in listed.lines().skip(1).map(Path::new) {
                if file.parent() == Some(Path::new(RUN_DIR)) {
                    let _ = std::fs::remove_file(file);
                }
            }
        }
    }
}
