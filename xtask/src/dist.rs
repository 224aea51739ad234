//! `cargo xtask dist`: the Debian package, with completions and man pages generated from
//! the agent's command line definition.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap_complete::Shell;

use crate::{cargo, run};

#[derive(clap::Args)]
pub struct Options {
    /// Where the .deb goes.
    #[arg(long, value_name = "DIR", default_value = "target/dist")]
    out_dir: PathBuf,
}

pub fn run_dist(options: Options) -> Result<()> {
    if !cargo(&["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        bail!("cargo-deb is not installed: cargo install cargo-deb --locked");
    }
    generate(&target_dir().join("release").join("assets"))?;
    // Built here, not by cargo-deb: the man page glob would make it build the whole workspace.
    run(cargo(&[
        "build",
        "--release",
        "--locked",
        "--package",
        "limiter-user",
    ]))?;
    std::fs::create_dir_all(&options.out_dir)?;
    let mut deb = cargo(&["deb", "--package", "limiter-user", "--no-build", "--strip"]);
    deb.arg("--output").arg(&options.out_dir);
    run(deb)
}

/// The target directory cargo-deb reads `target/release/` from.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// Completions for bash, zsh and fish, and a man page per command.
fn generate(assets: &Path) -> Result<()> {
    let completions = assets.join("completions");
    let man = assets.join("man");
    for dir in [&completions, &man] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut command = limiter_user::command();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut command, "limiter-user", &completions)?;
    }
    clap_mangen::generate_to(limiter_user::command(), &man)?;
    Ok(())
}
