//! Where and when the figures were taken.

use std::time::Duration;

use anyhow::{Context, Result};

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
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo")?;
        let meminfo = std::fs::read_to_string("/proc/meminfo")?;
        Ok(Machine {
            date: command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"])?,
            commit: commit(),
            cpus: std::thread::available_parallelism()?.get(),
            cpu_model: field(&cpuinfo, "model name")
                .unwrap_or("unknown")
                .to_string(),
            memory: field(&meminfo, "MemTotal")
                .and_then(|v| v.strip_suffix(" kB")?.trim().parse::<f64>().ok())
                .map(|kib| format!("{:.0} GiB", kib / (1024.0 * 1024.0)))
                .unwrap_or_else(|| "unknown".into()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")?
                .trim()
                .to_string(),
            idle_before: idle_percent()?,
            idle_after: None,
        })
    }
}

/// `name: value` lines, as in /proc/cpuinfo and /proc/meminfo.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim())
    })
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
        let stat = std::fs::read_to_string("/proc/stat")?;
        let cpu = stat.lines().next().context("empty /proc/stat")?;
        let ticks: Vec<u64> = cpu
            .split_whitespace()
            .skip(1)
            .take(8) // user .. steal; guest time is already in user
            .filter_map(|t| t.parse().ok())
            .collect();
        // user nice system idle iowait ...: idle and iowait are time nothing ran.
        let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
        Ok((idle, ticks.iter().sum()))
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
