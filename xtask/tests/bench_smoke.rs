//! The benchmark's code path, one short iteration, so that it does not rot: no figure is
//! checked, only that every part ran or said why not, and that nothing was left behind
//! (root, real kernel).

use std::process::{Command, Stdio};

use limiter_integration_tests::{cgroup2_mount, kernel_test};

#[kernel_test]
fn one_short_iteration_of_every_part_runs_and_cleans_up() {
    let child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench", "--smoke"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench --smoke failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    for part in [
        "### connect+close",
        "### Keep-alive HTTP",
        "### Kernel run time per program invocation",
        "### The agent",
        "### The control crate",
    ] {
        let section = stdout
            .split(part)
            .nth(1)
            .unwrap_or_else(|| panic!("no {part} in:\n{stdout}"));
        let body = section.split("\n### ").next().unwrap();
        // Either a table of figures, or the reason it was skipped, also said on its own line.
        let skipped = body.contains("Skipped: ");
        assert!(
            skipped || body.contains("\n|---"),
            "{part} is empty:\n{body}"
        );
        if skipped {
            assert!(stdout.contains("\nskipped: "), "{part} skipped silently");
        }
    }
    let ours = |name: &str| name.contains("bench") && name.contains(&format!("{pid}"));
    let left: Vec<String> = [cgroup2_mount(), "/sys/fs/bpf/limiter".into()]
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flatten()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| ours(name))
        .collect();
    assert!(left.is_empty(), "cgroups or pins left behind: {left:?}");
}
