//! Records the commit the binary is built from, for `--version` and `limiter_build_info`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=LIMITER_COMMIT");
    let commit = std::env::var("LIMITER_COMMIT")
        .ok()
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=LIMITER_COMMIT={commit}");
    // Build again when HEAD moves: a checkout, or a commit on the current branch.
    let head = git(&["rev-parse", "--git-path", "HEAD"]);
    let branch = git(&["symbolic-ref", "--quiet", "HEAD"])
        .and_then(|r| git(&["rev-parse", "--git-path", &r]));
    for path in [head, branch].into_iter().flatten() {
        println!("cargo:rerun-if-changed={path}");
    }
}
