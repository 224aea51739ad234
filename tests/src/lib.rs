//! The kit for tests against the real kernel: a cgroup of their own, loopback upstreams,
//! the agent and client processes, and cleanup that runs even when a test fails.

mod agent;
mod bpftool;
mod cgroup;
mod forge;
mod harness;
mod http;
mod load;
mod netns;
mod nginx;
mod peers;
mod postgres;
mod probe;
mod process;
mod status;
mod temp_file;
mod upstream;

pub use agent::{
    agent_bin, agent_command, assert_bounded, assert_refused, signal_logging, window_logging,
    Agent, LoggedSignal,
};
pub use bpftool::{assert_no_programs, dests_entry, map_entry};
pub use cgroup::{cgroup2_mount, TestCgroup};
pub use forge::{client_ends, forge_rst};
pub use harness::{hang_guard, require_root, wait_until, HANG_GUARD_VAR, SKIP_VAR};
pub use http::{serve_http, SlowHttp};
pub use limiter_kernel_test::kernel_test;
pub use load::{CurlLoad, Endings};
pub use netns::TestNetns;
pub use nginx::Nginx;
pub use peers::{curl_ttfb, go_get, Answers, Certificate, GoLoad, TlsServer, TlsStack};
pub use postgres::{postgres_bin, Cluster};
pub use probe::{peernames, probe_bin, tally, Probe};
pub use process::output;
pub use status::{baseline_settled, field, global, row, row_in, status, status_report};
pub use temp_file::TempFile;
pub use upstream::{closed_port, Behaviour, Blackhole, Upstream};
