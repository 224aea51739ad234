//! A cgroup of the test's own, removed with everything in it when the test ends.

use std::{
    ffi::CString,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use crate::harness::hang_guard;

pub fn cgroup2_mount() -> PathBuf {
    procfs::mounts()
        .expect("cannot read /proc/mounts")
        .into_iter()
        .find(|m| m.fs_vfstype == "cgroup2")
        .map(|m| PathBuf::from(m.fs_file))
        .expect("no cgroup v2 mount in /proc/mounts")
}

/// A cgroup made for one test; on drop its processes are killed and it is removed.
pub struct TestCgroup {
    path: PathBuf,
}

impl TestCgroup {
    pub fn new(tag: &str) -> Self {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "limiter-test-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        Self::create(cgroup2_mount().join(name))
    }

    /// Removes the (empty) cgroup and creates it again, as systemd does on a service restart.
    pub fn recreate(&self) {
        std::fs::remove_dir(&self.path).expect("the cgroup must be empty to be removed");
        std::fs::create_dir(&self.path).unwrap();
    }

    fn create(path: PathBuf) -> Self {
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TestCgroup { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The agent's default pin directory for this cgroup.
    pub fn pin_dir(&self) -> PathBuf {
        let rel = self.path.strip_prefix(cgroup2_mount()).unwrap();
        Path::new("/sys/fs/bpf/limiter").join(rel.to_string_lossy().replace('-', "\\x2d"))
    }

    /// A command whose process joins this cgroup before it execs.
    pub fn command(&self, program: &Path) -> Command {
        let procs =
            CString::new(self.path.join("cgroup.procs").to_string_lossy().as_bytes()).unwrap();
        let mut cmd = Command::new(program);
        // SAFETY: only async-signal-safe calls (open, write, close) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if written != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path.join("cgroup.kill"), "1");
        let populated = || {
            std::fs::read_to_string(self.path.join("cgroup.events"))
                .map(|e| e.contains("populated 1"))
                .unwrap_or(false)
        };
        let start = Instant::now();
        while populated() && start.elapsed() < hang_guard() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir(&self.path);
        // What an agent killed mid-test leaves: its pins (its lock file blocks nobody).
        let _ = std::fs::remove_dir_all(self.pin_dir());
    }
}
