//! The lab's code path, one short iteration of every run, so that it does not rot: no
//! figure is checked, only that it ran, wrote its report, pictures and series, and left
//! nothing behind (root, real kernel, nginx, wrk and PostgreSQL installed).

use std::process::{Command, Stdio};

use limiter_integration_tests::{cgroup2_mount, kernel_test};

/// The rig's shapes, as `cargo xtask lab --shapes` names them.
const SHAPES: [&str; 6] = [
    "workers-8",
    "workers-32",
    "workers-128",
    "lognormal",
    "cores-16",
    "spare",
];

#[kernel_test]
fn one_short_iteration_of_every_run_writes_the_report_and_cleans_up() {
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("lab.md");
    let series = out.path().join("series");
    let child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["lab", "--smoke", "--out"])
        .arg(&report)
        .arg("--series")
        .arg(&series)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let run = child.wait_with_output().unwrap();
    assert!(
        run.status.success(),
        "lab --smoke failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(&report).unwrap();
    for section in [
        "## Targets",
        "## nginx rig",
        "### cores-16: 16 cores shared",
        "#### limiter in prod",
        "## Open loop: the production incident",
        "## pgbench",
    ] {
        assert!(text.contains(section), "no {section} in:\n{text}");
    }
    let shapes = SHAPES.map(|s| format!("img/lab-nginx-{s}.svg"));
    for picture in shapes
        .iter()
        .map(String::as_str)
        .chain(["img/lab-open-loop.svg", "img/lab-pgbench.svg"])
    {
        assert!(text.contains(picture), "{picture} is not linked");
        let svg = std::fs::read_to_string(out.path().join(picture)).unwrap();
        assert!(svg.contains("<svg"), "{picture} is not an SVG");
    }
    // The agent's windows, as JSON lines: a smoke run's few seconds may close none.
    for run in ["nginx-workers-8-prod", "open-loop-prod", "pgbench-prod"] {
        let path = series.join(format!("{run}-windows.jsonl"));
        let lines = std::fs::read_to_string(&path).unwrap();
        for line in lines.lines() {
            let window: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(window["limit"].is_number(), "{path:?}: {line}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(series.join("nginx-workers-32-none-windows.jsonl")).unwrap(),
        "",
        "no agent, no windows"
    );

    // Names carry the lab's pid between dashes (escaped as \x2d in pin directories).
    let ours = |name: &str| {
        name.replace("\\x2d", "-")
            .split('-')
            .any(|part| part == pid.to_string())
    };
    let left: Vec<String> = [
        cgroup2_mount(),
        "/sys/fs/bpf/limiter".into(),
        "/var/run/netns".into(),
    ]
    .iter()
    .filter_map(|dir| std::fs::read_dir(dir).ok())
    .flatten()
    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
    .filter(|name| ours(name))
    .collect();
    assert!(
        left.is_empty(),
        "cgroups, pins or namespaces left: {left:?}"
    );
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let veth = format!("lt{pid}h");
    assert!(
        !String::from_utf8_lossy(&links.stdout).contains(&veth),
        "veth {veth}* left"
    );
}

#[kernel_test]
fn it_refuses_to_run_without_root_and_says_how() {
    let run = Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .arg(env!("CARGO_BIN_EXE_xtask"))
        .args(["lab", "--smoke"])
        .output()
        .unwrap();
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("run it as root"), "{stderr}");
}
