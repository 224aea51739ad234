//! The kernel to boot: an image given by path, or a Debian kernel package fetched and
//! unpacked (not installed: installing builds an initrd and pulls in a boot loader, and
//! the VM needs neither).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, ensure, Context, Result};

/// The kernel image for `spec`: a path to one, or the version of a Debian
/// `linux-image-VERSION` package (e.g. `6.1.0-57-amd64`), unpacked under `target/vm`
/// with its modules beside it, where virtme-ng looks for them.
pub fn image(spec: &str) -> Result<PathBuf> {
    let path = Path::new(spec);
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    ensure!(
        !spec.contains('/'),
        "{spec}: no such kernel image (give a path to one, or a Debian kernel package version such as 6.1.0-57-amd64)"
    );
    let version = spec.strip_prefix("linux-image-").unwrap_or(spec);
    unpacked(version)
}

fn unpacked(version: &str) -> Result<PathBuf> {
    let root = crate::workspace_root()
        .join("target/vm/kernels")
        .join(version);
    let image = root.join("boot").join(format!("vmlinuz-{version}"));
    if image.is_file() {
        return Ok(image);
    }
    let download = root.join("download");
    std::fs::create_dir_all(&download)
        .with_context(|| format!("cannot create {}", download.display()))?;
    let package = format!("linux-image-{version}");
    let status = Command::new("apt-get")
        .args(["download", "-q", &package])
        .current_dir(&download)
        .status()
        .context("cannot run apt-get (a Debian kernel package needs apt)")?;
    if !status.success() {
        bail!("cannot fetch {package}: see `apt-cache search --names-only '^linux-image-'` for the versions apt knows");
    }
    for deb in std::fs::read_dir(&download)? {
        let deb = deb?.path();
        crate::run({
            let mut cmd = Command::new("dpkg-deb");
            cmd.arg("-x").arg(&deb).arg(&root);
            cmd
        })?;
        std::fs::remove_file(&deb)?;
    }
    ensure!(
        image.is_file(),
        "{package} holds no {}",
        image.strip_prefix(&root).unwrap_or(&image).display()
    );
    Ok(image)
}
