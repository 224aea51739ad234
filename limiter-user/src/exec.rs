//! `limiter-user exec -- CMD`: a cgroup of its own for CMD, attached before CMD starts,
//! removed once CMD and everything it started are gone.

use std::{
    collections::HashSet,
    ffi::{OsStr, OsString},
    fs::File,
    io::Write,
    os::unix::{ffi::OsStrExt, fs::PermissionsExt, process::ExitStatusExt},
    path::{Path, PathBuf},
    process::{ExitCode, ExitStatus},
};

use anyhow::{bail, Context, Result};
use nix::{
    sys::{
        signal::{self, SigSet},
        signalfd::{SfdFlags, SignalFd},
    },
    unistd::{getpgid, getpgrp, Pid},
};
use tokio::io::unix::AsyncFd;
use tracing::{debug, error, info};

use crate::{agent, cgroup::Cgroup, cli::ExecArgs, logging, pins::PinDir, preflight};

/// The limiter itself could not start (as env(1) and timeout(1) report their own failures).
pub const FAILED: u8 = 125;
/// CMD exists but cannot be executed.
pub const NOT_EXECUTABLE: u8 = 126;
/// CMD is not found.
pub const NOT_FOUND: u8 = 127;

/// Passes over the cgroup when passing a signal on (see `Supervised::forward`).
const FORWARD_PASSES: usize = 16;

/// CMD could not be started; carries the shell's exit code for it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct LaunchError {
    pub code: u8,
    message: String,
}

impl LaunchError {
    fn new(code: u8, program: &OsStr, what: impl std::fmt::Display) -> Self {
        LaunchError {
            code,
            message: format!("{}: {what}", program.to_string_lossy()),
        }
    }
}

/// The program to start inside the cgroup, found before anything is created.
pub struct Launch {
    path: PathBuf,
    argv: Vec<OsString>,
    signals: Forwarded,
}

/// The signals passed on to CMD, read with their origin: one the terminal sent to its
/// whole foreground process group (Ctrl-C) has reached CMD already and is not sent twice.
struct Forwarded {
    mask: SigSet,
    fd: SignalFd,
}

impl Forwarded {
    /// Blocks the signals for this thread and those it starts, to read them from a
    /// descriptor instead; call before the runtime starts any thread.
    fn take() -> Result<Self> {
        let mut mask = SigSet::empty();
        for sig in [signal::SIGINT, signal::SIGTERM, signal::SIGHUP] {
            mask.add(sig);
        }
        mask.thread_block().context("cannot block signals")?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .context("cannot read signals (signalfd)")?;
        Ok(Forwarded { mask, fd })
    }
}

impl Launch {
    /// Finds CMD as a shell would (on PATH unless it names a path), and takes over the
    /// signals to pass on to it.
    pub fn resolve(argv: Vec<OsString>) -> Result<Self> {
        let name = argv.first().cloned().unwrap_or_default();
        let path = find_program(&name, std::env::var_os("PATH").as_deref())?;
        Ok(Launch {
            path,
            argv,
            signals: Forwarded::take()?,
        })
    }

    /// Starts CMD inside `cgroup`: the child joins the cgroup between fork and exec, so
    /// that its very first connect is already governed.
    pub fn spawn(self, cgroup: &Cgroup) -> Result<Supervised> {
        // A Ctrl-C while attaching never reached a CMD: CMD is not started at all.
        if let Some(info) = self.signals.fd.read_signal()? {
            bail!(
                "signal {} before {} started: not starting it",
                info.ssi_signo,
                self.path.display()
            );
        }
        let procs_path = cgroup.path().join("cgroup.procs");
        let mut procs = File::options()
            .write(true)
            .open(&procs_path)
            .with_context(|| format!("cannot open {}", procs_path.display()))?;
        let mut command = tokio::process::Command::new(&self.path);
        command.arg0(&self.argv[0]).args(&self.argv[1..]);
        let mask = self.signals.mask;
        // SAFETY: between fork and exec the child only calls write() on an open descriptor
        // and pthread_sigmask(), both async-signal-safe; the descriptor is close-on-exec,
        // so CMD never sees it, and CMD gets the signals unblocked as a shell leaves them.
        unsafe {
            command.pre_exec(move || {
                procs.write_all(b"0")?;
                mask.thread_unblock().map_err(std::io::Error::from)
            });
        }
        let child = command.spawn().map_err(|e| {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => NOT_FOUND,
                _ => NOT_EXECUTABLE,
            };
            LaunchError::new(code, &self.argv[0], e)
        })?;
        info!(pid = child.id(), cgroup = %cgroup.path().display(), "started {}", self.path.display());
        Ok(Supervised {
            child,
            program: self.path,
            status: None,
            cgroup: cgroup.clone(),
            // SAFETY: the descriptor is the signalfd's, owned by the AsyncFd it is registered
            // with: it cannot be closed while registered.
            signals: unsafe { AsyncFd::register(self.signals.fd) }.map_err(std::io::Error::from)?,
        })
    }
}

fn find_program(name: &OsStr, path_var: Option<&OsStr>) -> Result<PathBuf, LaunchError> {
    if name.is_empty() {
        return Err(LaunchError::new(NOT_FOUND, name, "command not found"));
    }
    if name.as_bytes().contains(&b'/') {
        return check_executable(Path::new(name), name);
    }
    let dirs = path_var.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    let mut found_unusable = None;
    for dir in std::env::split_paths(dirs) {
        let candidate = dir.join(name);
        if !candidate.exists() {
            continue;
        }
        match check_executable(&candidate, name) {
            Ok(path) => return Ok(path),
            Err(e) => found_unusable = found_unusable.or(Some(e)),
        }
    }
    Err(found_unusable.unwrap_or_else(|| LaunchError::new(NOT_FOUND, name, "command not found")))
}

fn check_executable(path: &Path, name: &OsStr) -> Result<PathBuf, LaunchError> {
    let meta = std::fs::metadata(path)
        .map_err(|_| LaunchError::new(NOT_FOUND, name, "no such file or directory"))?;
    if meta.is_dir() {
        return Err(LaunchError::new(NOT_EXECUTABLE, name, "is a directory"));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(LaunchError::new(
            NOT_EXECUTABLE,
            name,
            "permission denied (not executable)",
        ));
    }
    Ok(path.to_path_buf())
}

/// CMD while it runs, then its exit status until the cgroup is empty.
pub struct Supervised {
    child: tokio::process::Child,
    program: PathBuf,
    status: Option<ExitStatus>,
    cgroup: Cgroup,
    signals: AsyncFd<SignalFd>,
}

impl Supervised {
    /// Handles what happens next: CMD's exit (recorded), or a signal to pass on. Never
    /// resolves without a CMD.
    pub async fn next(this: &mut Option<Supervised>) -> std::io::Result<()> {
        let Some(s) = this else {
            return std::future::pending().await;
        };
        tokio::select! {
            status = s.child.wait(), if s.status.is_none() => s.record(status?),
            ready = s.signals.readable_mut() => {
                let mut ready = ready?;
                match ready.get_inner_mut().read_signal()? {
                    Some(info) => {
                        let sig = signal::Signal::try_from(info.ssi_signo as i32)
                            .map_err(std::io::Error::from)?;
                        // The kernel sends a terminal's signals (SI_KERNEL); kill() is SI_USER.
                        let from_terminal = info.ssi_code == libc::SI_KERNEL;
                        if from_terminal {
                            debug!("{sig} from the terminal: it reached CMD's process group already");
                        }
                        s.forward(sig, from_terminal);
                    }
                    None => ready.clear_ready(),
                }
            }
        }
        Ok(())
    }

    fn record(&mut self, status: ExitStatus) {
        info!("{} exited ({status})", self.program.display());
        self.status = Some(status);
    }

    /// Passes a signal on to every process in the cgroup, as systemd's
    /// `KillMode=control-group` does: a shell's command and whatever CMD left running get
    /// it too. One from the terminal reached exec's foreground process group already.
    fn forward(&self, sig: signal::Signal, from_terminal: bool) {
        let own_group = getpgrp();
        let mut signalled = HashSet::new();
        // Again while a pass finds a process the previous ones did not: one forked
        // meanwhile gets it too. Bounded, so a fork loop cannot hold the agent here.
        for _ in 0..FORWARD_PASSES {
            let pids = self.cgroup.pids().unwrap_or_default();
            let fresh: Vec<i32> = pids.into_iter().filter(|&p| signalled.insert(p)).collect();
            if fresh.is_empty() {
                break;
            }
            for pid in fresh.into_iter().map(Pid::from_raw) {
                if from_terminal && getpgid(Some(pid)) == Ok(own_group) {
                    continue;
                }
                // A process that has just exited is no error.
                let _ = signal::kill(pid, sig);
            }
        }
    }

    /// CMD's status, once CMD and everything it started are gone.
    pub fn finished(&self) -> Result<Option<ExitStatus>> {
        match self.status {
            Some(status) if !self.cgroup.populated()? => Ok(Some(status)),
            _ => Ok(None),
        }
    }
}

/// The exit code that reports `status` as a shell does.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        (None, None) => FAILED,
    }
}

/// Removes the transient cgroup however exec ends.
struct TransientCgroup(Cgroup);

impl Drop for TransientCgroup {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir(self.0.path()) {
            error!(
                "cannot remove cgroup {}: {e} (processes left in it?)",
                self.0.path().display()
            );
        }
    }
}

pub fn main(args: ExecArgs) -> ExitCode {
    // CMD's output is what the user runs it for: of the agent's own lines, only problems
    // and the refusal summaries, unless RUST_LOG asks for more.
    logging::init(
        args.agent.log_format,
        "warn,limiter_user::decision_log=info",
    );
    match exec(args) {
        Ok(status) => ExitCode::from(exit_code(status)),
        Err(e) => {
            eprintln!("limiter-user: {e:#}");
            let code = e.downcast_ref::<LaunchError>().map_or(FAILED, |l| l.code);
            ExitCode::from(code)
        }
    }
}

fn exec(args: ExecArgs) -> Result<ExitStatus> {
    // Before the runtime exists: its threads inherit the blocked signals.
    let launch = Launch::resolve(args.command.clone())?;
    // Everything that can be refused is refused before the cgroup exists.
    agent::ConfigSource::load(&args.agent)?;
    preflight::check_privileges()?;
    let parent = match &args.parent {
        Some(dir) => dir.clone(),
        None => crate::cgroup::mount_point().context(
            "no cgroup v2 file system is mounted on this machine: mount one (`mount -t cgroup2 none /sys/fs/cgroup`) or pass --parent DIR",
        )?,
    };
    let name = format!("limiter-exec-{}", std::process::id());
    let cgroup = TransientCgroup(Cgroup::create_below(&parent, &name)?);
    let options = agent::Options {
        pin_dir: args.agent.pin_dir.clone().map(PinDir::at).transpose()?,
        metrics: args.agent.metrics,
        keep_attached: false,
    };
    let status = agent::run(cgroup.0.clone(), options, &args.agent, Some(launch))?;
    status.context("the agent stopped before the program ended")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_on_path_or_reported_with_the_shells_codes() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, mode: u32| {
            let path = dir.path().join(name);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            path
        };
        let runnable = write("runnable", 0o755);
        write("plain", 0o644);
        let path_var = dir.path().as_os_str();
        let find = |name: &str| find_program(OsStr::new(name), Some(path_var));

        assert_eq!(find("runnable").unwrap(), runnable);
        assert_eq!(find("plain").unwrap_err().code, NOT_EXECUTABLE);
        assert_eq!(find("absent").unwrap_err().code, NOT_FOUND);
        assert_eq!(find("").unwrap_err().code, NOT_FOUND);
        let as_path = dir.path().to_string_lossy().into_owned();
        assert_eq!(find(&as_path).unwrap_err().code, NOT_EXECUTABLE);
        assert_eq!(find("./absent").unwrap_err().code, NOT_FOUND);
        let message = find("absent").unwrap_err().to_string();
        assert_eq!(message, "absent: command not found");
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
