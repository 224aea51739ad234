//! The shipped unit and example configuration stay in step with the CLI and the config.

use clap::Parser;

use crate::{cli::Cli, config::Config};

const UNIT: &str = include_str!("../../dist/limiter@.service");

#[test]
fn the_unit_runs_a_command_line_the_agent_accepts() {
    let exec = UNIT
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart");
    let argv: Vec<String> = exec
        .replace("${LIMITER_CGROUP_ROOT}", "/sys/fs/cgroup")
        .replace("%i", "myapp")
        .split_whitespace()
        .map(String::from)
        .collect();
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{exec}: {e}"));
    assert!(cli.command.is_some());
}

#[test]
fn the_unit_grants_exactly_the_capabilities_preflight_checks() {
    for cap in [
        "CAP_BPF",
        "CAP_NET_ADMIN",
        "CAP_SYS_ADMIN",
        "CAP_SYS_PTRACE",
    ] {
        let granted = |key: &str| {
            UNIT.lines()
                .find_map(|l| l.strip_prefix(key))
                .is_some_and(|caps| caps.split_whitespace().any(|c| c == cap))
        };
        assert!(granted("CapabilityBoundingSet="), "{cap}");
        assert!(granted("AmbientCapabilities="), "{cap}");
    }
    assert!(UNIT.contains("ReadWritePaths=/sys/fs/bpf"));
    assert!(UNIT.contains("NoNewPrivileges=yes"));
}

#[test]
fn the_example_configuration_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../dist/limiter.toml");
    let config = Config::load(std::path::Path::new(path)).unwrap();
    assert_eq!(config.mode, crate::config::Mode::Shadow);
}

#[test]
fn the_pin_root_is_made_root_only_at_boot() {
    let tmpfiles = include_str!("../../dist/limiter.tmpfiles");
    let entries: Vec<&str> = tmpfiles
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    let expected = format!("d {} 0700 root root -", crate::pins::ROOT);
    assert_eq!(entries, [expected.as_str()]);
}
