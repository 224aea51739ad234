//! What cargo built and where it put it, read from its JSON messages rather than guessed
//! from the target directory's layout.

use std::{
    io::BufRead,
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// An executable cargo built: a binary, or a test harness when `test` is set.
pub struct Executable {
    pub name: String,
    pub path: PathBuf,
    pub test: bool,
    /// The package's directory, where cargo runs its test harnesses.
    pub package_dir: PathBuf,
}

/// Runs `cargo ARGS --message-format=json-render-diagnostics` in the workspace and returns
/// the executables it built (or found up to date).
pub fn build(args: &[&str]) -> Result<Vec<Executable>> {
    let mut cmd = crate::cargo(args);
    cmd.arg("--message-format=json-render-diagnostics")
        .current_dir(crate::workspace_root())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("cannot run {cmd:?}"))?;
    let mut built = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().expect("piped")).lines() {
        let Ok(Artifact {
            target,
            profile,
            manifest_path,
            executable: Some(path),
        }) = serde_json::from_str(&line?)
        else {
            continue;
        };
        built.push(Executable {
            name: target.name,
            path,
            test: profile.test,
            package_dir: manifest_path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        });
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(built)
}

/// The part of cargo's `compiler-artifact` message this needs.
#[derive(Deserialize)]
struct Artifact {
    target: Target,
    profile: Profile,
    manifest_path: PathBuf,
    executable: Option<PathBuf>,
}

#[derive(Deserialize)]
struct Target {
    name: String,
}

#[derive(Deserialize)]
struct Profile {
    test: bool,
}
