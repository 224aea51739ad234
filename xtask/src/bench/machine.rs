//! Where and when the figures were taken.

use anyhow::{Context, Result};

pub struct Machine {
    pub date: String,
    pub commit: String,
    pub cpus: usize,
    pub cpu_model: String,
    pub memory: String,
    pub kernel: String,
    /// The 1-minute load average just before the run: other work skews every figure.
    pub load: String,
}

impl Machine {
    pub fn describe() -> Result<Self> {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo")?;
        let meminfo = std::fs::read_to_string("/proc/meminfo")?;
        Ok(Machine {
            date: command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"])?,
            commit: commit()?,
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
            load: std::fs::read_to_string("/proc/loadavg")?
                .split_whitespace()
                .next()
                .unwrap_or("unknown")
                .to_string(),
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

fn commit() -> Result<String> {
    let root = super::workspace_root();
    let git = |args: &[&str]| {
        let mut all = vec!["-C", root.to_str().unwrap_or(".")];
        all.extend_from_slice(args);
        command_line("git", &all)
    };
    let head = git(&["rev-parse", "--short", "HEAD"])?;
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    Ok(if dirty {
        format!("{head} with uncommitted changes")
    } else {
        head
    })
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
