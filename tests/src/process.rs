//! Running a program to completion.

use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Runs to completion and returns its standard output; fails with its standard error.
pub fn output(mut cmd: Command) -> Result<String> {
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}
