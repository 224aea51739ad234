//! The processes the benchmarks start, and what /proc says about the agent.

use std::{
    io::{BufRead, BufReader},
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context, Result};
pub use limiter_integration_tests::output;
use limiter_integration_tests::TestCgroup;
use procfs::process::Process;
use serde::Deserialize;

use crate::client;

/// Never outlive the benchmark, even when it is killed: SIGTERM when it exits.
pub fn dies_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Runs `cmd` on `cpu` only: a process the scheduler moves from core to core in the
/// middle of a loop measured in microseconds makes the figures jump from round to round.
pub fn pin(cmd: &mut Command, cpu: usize) {
    // SAFETY: sched_setaffinity is a plain system call on a cpu_set_t of our own.
    unsafe {
        cmd.pre_exec(move || set_affinity(cpu));
    }
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data that sched_getaffinity fills; CPU_ISSET reads within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// Keeps the calling thread on `cpu`.
pub fn pin_this_thread(cpu: usize) -> std::io::Result<()> {
    set_affinity(cpu)
}

fn set_affinity(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it for cpu < CPU_SETSIZE, and
    // sched_setaffinity(0) reads it for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `program` inside `cgroup`, ended with the benchmark.
pub fn in_cgroup(cgroup: &TestCgroup, program: &Path) -> Command {
    let mut cmd = cgroup.command(program);
    dies_with_parent(&mut cmd);
    cmd
}

/// A client that runs until told to stop: started, waited for until it says "ready", and
/// stopped by closing its standard input.
pub struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Running {
    pub fn start(mut cmd: Command) -> Result<Self> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {cmd:?}"))?;
        let mut running = Running {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().expect("piped")),
            child,
        };
        let mut line = String::new();
        running.stdout.read_line(&mut line)?;
        if line.trim_end() != "ready" {
            bail!("{cmd:?} did not get ready: {line:?}");
        }
        Ok(running)
    }

    pub fn stop<T: for<'de> Deserialize<'de>>(mut self) -> Result<T> {
        drop(self.stdin.take());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest)?;
        let status = self.child.wait()?;
        if !status.success() {
            bail!("the client failed ({status})");
        }
        client::parse_report(&rest)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// CPU time (user and system, every thread) a process has used so far.
pub fn cpu_time(pid: i32) -> Result<Duration> {
    let stat = Process::new(pid)?.stat()?;
    let ticks = stat.utime + stat.stime;
    Ok(Duration::from_secs_f64(
        ticks as f64 / procfs::ticks_per_second() as f64,
    ))
}

/// Resident memory now, in bytes.
pub fn resident_bytes(pid: i32) -> Result<u64> {
    let kib = Process::new(pid)?
        .status()?
        .vmrss
        .context("no VmRSS in /proc/PID/status")?;
    Ok(kib * 1024)
}

pub fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_of_this_process_is_known() {
        assert!(resident_bytes(std::process::id() as i32).unwrap() > 0);
    }
}
