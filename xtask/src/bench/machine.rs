//! Where and when the figures were taken.

use std::time::Duration;

use anyhow::{Context, Result};
use procfs::{CpuInfo, Current, CurrentSI, KernelStats, Meminfo};

pub struct Machine {
    pub date: String,
    pub commit: String,
    pub cpus: usize,
    pub cpu_model: String,
    pub memory: String,
    pub kernel: String,
    /// How idle the CPUs were in the second before the run and in the second after it:
    /// other work on the machine skews every figure.
    pub idle_before: f64,
    pub idle_after: Option<f64>,
}

impl Machine {
    pub fn describe() -> Result<Self> {
        Ok(Machine {
            date: command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"])?,
            commit: commit(),
            cpus: std::thread::available_parallelism()?.get(),
            cpu_model: CpuInfo::current()?
                .model_name(0)
                .unwrap_or("unknown")
                .to_string(),
            memory: format!(
                "{:.0} GiB",
                Meminfo::current()?.mem_total as f64 / (1024.0 * 1024.0 * 1024.0)
            ),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")?
                .trim()
                .to_string(),
            idle_before: idle_percent()?,
            idle_after: None,
        })
    }
}

/// The commit measured, and whether the checkout differs from it.
fn commit() -> String {
    let root = crate::workspace_root();
    let git = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown (not a git checkout)".into();
    };
    // Cargo.lock aside: cargo rewrites it for any new dependency, and it changes no code.
    let status = [
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":!Cargo.lock",
    ];
    match git(&status) {
        Some(changes) if changes.is_empty() => head,
        _ => format!("{head} with uncommitted changes"),
    }
}

/// Share of CPU time spent idle over a second, every CPU together (/proc/stat).
pub fn idle_percent() -> Result<f64> {
    let sample = || -> Result<(u64, u64)> {
        let t = KernelStats::current()?.total;
        let [iowait, irq, softirq, steal] =
            [t.iowait, t.irq, t.softirq, t.steal].map(|v| v.unwrap_or(0));
        // Idle and iowait are time nothing ran; guest time is already in user.
        let idle = t.idle + iowait;
        Ok((
            idle,
            t.user + t.nice + t.system + idle + irq + softirq + steal,
        ))
    };
    let (idle0, total0) = sample()?;
    std::thread::sleep(Duration::from_secs(1));
    let (idle1, total1) = sample()?;
    Ok(100.0 * (idle1 - idle0) as f64 / (total1 - total0).max(1) as f64)
}

/// First line of a command's output (some tools print their version on stderr).
pub fn command_line(program: &str, args: &[&str]) -> Result<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string())
}
