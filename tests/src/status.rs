//! What the agent's `status --json` reports for a cgroup.

use std::net::SocketAddr;

use crate::{agent::agent_command, TestCgroup};

/// `status --json` for the cgroup: the object with `agent`, `globals`, `destinations`.
pub fn status_report(cgroup: &TestCgroup) -> serde_json::Value {
    let out = agent_command(&[
        "status",
        "--cgroup",
        &cgroup.path().to_string_lossy(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status --json is not JSON")
}

/// The destinations of `status --json`, one object per row.
pub fn status(cgroup: &TestCgroup) -> Vec<serde_json::Value> {
    match status_report(cgroup)
        .get_mut("destinations")
        .map(serde_json::Value::take)
    {
        Some(serde_json::Value::Array(rows)) => rows,
        other => panic!("status --json has no destinations array: {other:?}"),
    }
}

/// One of the `globals` of `status --json`.
pub fn global(cgroup: &TestCgroup, name: &str) -> u64 {
    status_report(cgroup)["globals"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no global `{name}` in status --json"))
}

/// The status row of one destination.
pub fn row(cgroup: &TestCgroup, dest: SocketAddr) -> Option<serde_json::Value> {
    row_in(&status(cgroup), dest)
}

/// The row of one destination among `rows`, from one call of [`status`].
pub fn row_in(rows: &[serde_json::Value], dest: SocketAddr) -> Option<serde_json::Value> {
    rows.iter()
        .find(|r| r["address"] == dest.ip().to_string() && r["port"] == dest.port())
        .cloned()
}

pub fn field(cgroup: &TestCgroup, dest: SocketAddr, name: &str) -> i64 {
    row(cgroup, dest).unwrap_or_else(|| panic!("{dest} is not in status"))[name]
        .as_i64()
        .unwrap_or_else(|| panic!("{name} is not a number"))
}

/// How far over the published p90 a baseline may sit and count as come down to it.
const SETTLED_BAND: f64 = 1.2;

/// Whether a row has a baseline and it has come down to the latency the row shows. A
/// baseline learned while the machine was busy (a loaded start, software emulation) is that
/// busy latency and sits over the real one for a few windows: a slowdown started then is a
/// smaller step over it, which the controller may read in part as a new normal.
pub fn baseline_settled(row: &serde_json::Value) -> bool {
    match (row["baseline_ms"].as_f64(), row["p90_ms"].as_f64()) {
        (Some(baseline), Some(p90)) => baseline <= SETTLED_BAND * p90,
        _ => false,
    }
}
