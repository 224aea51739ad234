//! What bpftool sees: the pinned maps and the programs attached to a cgroup.

use std::{net::SocketAddr, process::Command};

use crate::TestCgroup;

/// A destination's value in the pinned `dests` map as bpftool dumps it, fields named by BTF.
pub fn dests_entry(cgroup: &TestCgroup, dest: SocketAddr) -> Option<serde_json::Value> {
    map_entry(cgroup, "dests", dest)
}

/// A destination's value in one of the pinned maps keyed by destination.
pub fn map_entry(cgroup: &TestCgroup, map: &str, dest: SocketAddr) -> Option<serde_json::Value> {
    let out = Command::new("bpftool")
        .args(["--json", "map", "dump", "pinned"])
        .arg(cgroup.pin_dir().join(map))
        .output()
        .expect("bpftool is not installed (apt-get install bpftool)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The key's address: IPv6 (IPv4 v4-mapped) as four words in network byte order.
    let ip = match dest.ip() {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        std::net::IpAddr::V6(v6) => v6,
    };
    let words: Vec<u32> = ip
        .octets()
        .chunks_exact(4)
        .map(|w| u32::from_ne_bytes(w.try_into().unwrap()))
        .collect();
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    entries
        .into_iter()
        .map(|e| e["formatted"].clone())
        .find(|e| e["key"]["port"] == dest.port() && e["key"]["addr"] == serde_json::json!(words))
        .map(|e| e["value"].clone())
}

/// bpftool lists no program attached to the cgroup.
pub fn assert_no_programs(cg: &TestCgroup) {
    let out = Command::new("bpftool")
        .args(["--json", "cgroup", "show"])
        .arg(cg.path())
        .output()
        .expect("bpftool is not installed (apt-get install bpftool)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.trim().is_empty() || text.trim() == "[]",
        "programs left attached: {text}"
    );
}
