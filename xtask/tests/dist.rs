//! `cargo xtask dist`: the Debian package holds what the install section promises, and its
//! binary runs from a scratch root (needs cargo-deb and dpkg-deb; builds a release).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn dpkg_deb(args: &[&str], deb: &Path) -> String {
    run(Command::new("dpkg-deb").args(args).arg(deb))
}

#[test]
fn the_package_installs_the_agent_unit_conffile_completions_and_man_pages() {
    let out = tempfile::tempdir().unwrap();
    run(Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("dist")
        .arg("--out-dir")
        .arg(out.path()));
    let debs: Vec<PathBuf> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    assert_eq!(debs.len(), 1, "{debs:?}");
    let deb = &debs[0];

    let field = |name: &str| {
        let out = Command::new("dpkg-deb")
            .arg("--field")
            .arg(deb)
            .arg(name)
            .output()
            .unwrap();
        Some(String::from_utf8(out.stdout).unwrap().trim().to_string()).filter(|v| !v.is_empty())
    };
    assert_eq!(field("Package").as_deref(), Some("limiter"));
    let version = field("Version").unwrap_or_default();
    assert!(
        version.starts_with(&format!("{}-", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    assert!(
        field("Depends").is_some_and(|d| d.contains("libc6")),
        "{:?}",
        field("Depends")
    );
    assert!(field("Maintainer").is_some());
    assert!(field("Description").is_some_and(|d| d.contains("concurrency")));

    let contents = dpkg_deb(&["--contents"], deb);
    for path in [
        "./usr/bin/limiter-user",
        "./etc/limiter/limiter.toml",
        "./usr/lib/tmpfiles.d/limiter.conf",
        "limiter@.service",
        "./usr/share/bash-completion/completions/limiter-user",
        "./usr/share/zsh/vendor-completions/_limiter-user",
        "./usr/share/fish/vendor_completions.d/limiter-user.fish",
        "./usr/share/man/man1/limiter-user.1",
        "./usr/share/man/man1/limiter-user-exec.1",
        "./usr/share/doc/limiter/operations.md",
    ] {
        assert!(
            contents.contains(path),
            "{path} is not in the package:\n{contents}"
        );
    }

    let control = tempfile::tempdir().unwrap();
    run(Command::new("dpkg-deb")
        .arg("--control")
        .arg(deb)
        .arg(control.path()));
    let conffiles = std::fs::read_to_string(control.path().join("conffiles")).unwrap();
    assert!(
        conffiles.lines().any(|l| l == "/etc/limiter/limiter.toml"),
        "the configuration is a conffile: {conffiles}"
    );

    let root = tempfile::tempdir().unwrap();
    run(Command::new("dpkg-deb")
        .arg("--extract")
        .arg(deb)
        .arg(root.path()));
    let binary = root.path().join("usr/bin/limiter-user");
    let elf = run(Command::new("file").arg(&binary));
    assert!(elf.contains(", stripped"), "{elf}");
    let version = run(Command::new(&binary).arg("--version"));
    let expected = format!("limiter-user {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(version.starts_with(&expected), "{version}");
    let commit = run(Command::new("git").args(["rev-parse", "--short=12", "HEAD"]));
    assert!(version.contains(commit.trim()), "{version} names {commit}");
    let unit = std::fs::read_to_string(
        root.path().join(
            contents
                .lines()
                .find_map(|l| {
                    l.split_whitespace()
                        .last()
                        .filter(|p| p.ends_with("limiter@.service"))
                })
                .unwrap(),
        ),
    )
    .unwrap();
    assert!(
        unit.contains("ExecStart=/usr/bin/limiter-user "),
        "the unit runs the packaged binary"
    );
}
