//! Kernel run time per program invocation, from the kernel's own BPF run-time statistics.

use std::{collections::BTreeMap, os::fd::OwnedFd, path::Path, process::Command, time::Duration};

use anyhow::{Context, Result};
use limiter_integration_tests::{Behaviour, Certificate, TempFile, TestCgroup, Upstream};
use serde::Deserialize;

use super::{
    connect::{self, Condition},
    exchange, http, process, servers,
    wrk::Wrk,
    Binaries, Scale,
};

/// Run count and total run time of one program.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct RunTime {
    pub runs: u64,
    pub ns: u64,
}

impl RunTime {
    pub fn per_run_ns(self) -> Option<f64> {
        (self.runs > 0).then(|| self.ns as f64 / self.runs as f64)
    }
}

/// The kernel's figures and what measuring them costs.
pub struct KernelResults {
    pub workloads: Vec<Workload>,
    /// Run time the statistics give a program that does nothing: part of every run below.
    pub empty_run_ns: f64,
}

impl KernelResults {
    /// A workload's time per connection or exchange, less the statistics' own cost.
    pub fn net_ns_per_unit(&self, w: &Workload) -> f64 {
        w.ns_per_unit() - w.runs_per_unit() * self.empty_run_ns
    }
}

/// What one workload cost in the kernel, per program.
pub struct Workload {
    pub name: &'static str,
    /// Connections made, or exchanges completed.
    pub units: u64,
    pub unit: &'static str,
    pub programs: BTreeMap<String, RunTime>,
}

impl Workload {
    /// Kernel time of all programs together per connection or exchange.
    pub fn ns_per_unit(&self) -> f64 {
        self.programs.values().map(|r| r.ns).sum::<u64>() as f64 / self.units as f64
    }

    /// Program runs per connection or exchange.
    pub fn runs_per_unit(&self) -> f64 {
        self.programs.values().map(|r| r.runs).sum::<u64>() as f64 / self.units as f64
    }
}

/// An empty cgroup_skb program; without headers, so it builds wherever clang does.
const EMPTY_PROGRAM: &str = "\
__attribute__((section(\"cgroup_skb/egress\"), used)) int empty(void *skb) { return 1; }
char LICENSE[] __attribute__((section(\"license\"), used)) = \"GPL\";
";

/// Removes a pinned program however the benchmark ends.
struct Pin(std::path::PathBuf);

impl Drop for Pin {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The run time the statistics report for a program that does nothing, run by the kernel
/// (BPF_PROG_TEST_RUN) with the statistics on: reading the clock around every run is not
/// free, and every figure above includes it once per run.
fn empty_run_ns(runs: u64) -> Result<f64> {
    #[derive(Deserialize)]
    struct Program {
        #[serde(default)]
        run_time_ns: u64,
        #[serde(default)]
        run_cnt: u64,
    }
    let source = TempFile::new("bench-empty.bpf.c", EMPTY_PROGRAM);
    let object = TempFile::new("bench-empty.bpf.o", "");
    // A packet of zeros: the program never looks at it.
    let packet = TempFile::new("bench-empty.pkt", &"\0".repeat(64));
    let mut clang = Command::new(std::env::var("CLANG").unwrap_or_else(|_| "clang".into()));
    clang
        .args(["-O2", "-target", "bpf", "-c"])
        .arg(&source.0)
        .arg("-o")
        .arg(&object.0);
    process::output(clang)?;
    let pin =
        Pin(Path::new("/sys/fs/bpf").join(format!("limiter-bench-empty-{}", std::process::id())));
    let pin_path = pin.0.to_string_lossy().into_owned();
    let mut load = Command::new("bpftool");
    load.args(["prog", "load"]).arg(&object.0).arg(&pin_path);
    process::output(load)?;
    let mut run = Command::new("bpftool");
    run.args(["prog", "run", "pinned", &pin_path, "data_in"])
        .arg(&packet.0)
        .args(["repeat", &runs.to_string()]);
    process::output(run)?;
    let p: Program = bpftool(&["prog", "show", "pinned", &pin_path])?;
    anyhow::ensure!(p.run_cnt > 0, "the empty program's runs were not counted");
    Ok(p.run_time_ns as f64 / p.run_cnt as f64)
}

/// Run-time statistics are on while this lives; the kernel turns them off again when its
/// descriptor closes, however the benchmark ends.
struct StatsEnabled {
    _fd: OwnedFd,
}

impl StatsEnabled {
    fn new() -> Result<Self> {
        let fd = aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .context("cannot enable BPF run-time statistics (BPF_ENABLE_STATS, Linux 5.8+)")?;
        Ok(StatsEnabled { _fd: fd })
    }
}

pub fn run(bins: &Binaries, scale: &Scale) -> Result<KernelResults> {
    let placement = connect::Placement::new();
    let closer = placement.upstream()?;
    let holder = Upstream::start("127.0.0.1:0", Behaviour::Hold);
    let echo = Upstream::start("127.0.0.1:0", Behaviour::Echo);
    // One agent for all three: generous everywhere but at the holder, which admits one.
    let config = TempFile::new(
        "bench-kernel.toml",
        &format!(
            "mode = \"prod\"\nalgorithm = \"fixed\"\nlimit = 1000\n\n\
             [[destination]]\nname = \"refusing\"\naddresses = [\"{}\"]\n\
             algorithm = \"fixed\"\nlimit = 1\n",
            holder.addr
        ),
    );
    let cgroup = TestCgroup::new("bench-kernel");
    let _stats = StatsEnabled::new()?;
    let empty_run_ns = empty_run_ns(100 * scale.kernel_connects as u64)?;
    let _agent = bins
        .agent
        .start(&cgroup, &["--config", &config.0.to_string_lossy()])?;
    let mut workloads = Vec::new();
    let mut before = attached_programs(cgroup.path())?;
    let mut measure = |name, units, unit| -> Result<()> {
        let after = attached_programs(cgroup.path())?;
        let programs = delta(&before, &after);
        before = after;
        workloads.push(Workload {
            name,
            units,
            unit,
            programs,
        });
        Ok(())
    };

    let n = scale.kernel_connects;
    connect::connect_loop(
        bins,
        &cgroup,
        placement,
        closer,
        n,
        Condition::GenerousLimit,
    )?;
    measure("connect+close, admitted", n as u64, "connection")?;
    connect::connect_loop(
        bins,
        &cgroup,
        placement,
        holder.addr,
        n,
        Condition::Refusing,
    )?;
    measure("connect refused", n as u64, "connection")?;
    let load = exchange::Load::one_destination(scale.samples_per_second);
    let (report, ()) = exchange::run(bins, &cgroup, &[echo.addr], &load, || {
        std::thread::sleep(Duration::from_secs_f64(scale.kernel_exchange_secs));
        Ok(())
    })?;
    measure("keep-alive request/response", report.exchanges, "exchange")?;
    if http::tools_installed() {
        // The same at full speed, as in the HTTP comparison: a sample per request.
        let servers = TestCgroup::new("bench-kernel-servers");
        let duration = Duration::from_secs(scale.http_seconds);
        let nginx = servers::nginx(&servers, None)?;
        let wrk = Wrk::new(1, 32).run(&cgroup, &format!("http://{}/", nginx.addr), duration)?;
        measure("keep-alive HTTP (wrk, nginx)", wrk.requests, "request")?;
        // Over TLS 1.3 the protocol's records are read: a header at each request and answer.
        let cert = Certificate::new();
        let nginx = servers::nginx(&servers, Some(cert.dir()))?;
        let wrk = Wrk::new(1, 32).run(&cgroup, &format!("https://{}/", nginx.addr), duration)?;
        measure(
            "keep-alive HTTPS, TLS 1.3 (wrk, nginx)",
            wrk.requests,
            "request",
        )?;
    }
    Ok(KernelResults {
        workloads,
        empty_run_ns,
    })
}

fn delta(
    before: &BTreeMap<String, RunTime>,
    after: &BTreeMap<String, RunTime>,
) -> BTreeMap<String, RunTime> {
    after
        .iter()
        .map(|(name, a)| {
            let b = before.get(name).copied().unwrap_or_default();
            let d = RunTime {
                runs: a.runs - b.runs,
                ns: a.ns - b.ns,
            };
            (name.clone(), d)
        })
        .collect()
}

/// Programs attached to a parent of a fresh cgroup: they would run in every condition, "no
/// programs" included, and would even limit the load generators.
pub fn inherited_programs() -> Result<Vec<String>> {
    #[derive(Deserialize)]
    struct Effective {
        name: String,
        attach_type: String,
    }
    let probe = TestCgroup::new("bench-preflight");
    let effective: Vec<Effective> = bpftool(&[
        "cgroup",
        "show",
        &probe.path().to_string_lossy(),
        "effective",
    ])?;
    Ok(effective
        .into_iter()
        .map(|e| format!("{} ({})", e.name, e.attach_type))
        .collect())
}

/// The programs of the agent attached to `cgroup` (by name) and their statistics so far:
/// those attached to the cgroup, and the tracepoint of TCP state changes that shares their
/// maps (it runs for every socket of the machine). Found through the cgroup and the maps,
/// not by name: other limiters on the machine load programs of the same names.
fn attached_programs(cgroup: &Path) -> Result<BTreeMap<String, RunTime>> {
    #[derive(Deserialize)]
    struct Attached {
        id: u32,
    }
    #[derive(Deserialize)]
    struct Program {
        id: u32,
        name: String,
        #[serde(default)]
        run_time_ns: u64,
        #[serde(default)]
        run_cnt: u64,
        #[serde(default)]
        map_ids: Vec<u32>,
    }
    let attached: Vec<Attached> = bpftool(&["cgroup", "show", &cgroup.to_string_lossy()])?;
    let ids: Vec<u32> = attached.iter().map(|a| a.id).collect();
    let loaded: Vec<Program> = bpftool(&["prog", "show"])?;
    let maps: Vec<u32> = loaded
        .iter()
        .filter(|p| ids.contains(&p.id))
        .flat_map(|p| p.map_ids.iter().copied())
        .collect();
    Ok(loaded
        .into_iter()
        .filter(|p| {
            ids.contains(&p.id)
                || (p.name.starts_with("limiter_state")
                    && p.map_ids.iter().any(|m| maps.contains(m)))
        })
        .map(|p| {
            (
                p.name,
                RunTime {
                    runs: p.run_cnt,
                    ns: p.run_time_ns,
                },
            )
        })
        .collect())
}

fn bpftool<T: for<'de> Deserialize<'de>>(args: &[&str]) -> Result<T> {
    let mut cmd = Command::new("bpftool");
    cmd.arg("--json").args(args);
    let out = process::output(cmd)?;
    // `cgroup show` prints nothing at all, not [], for a cgroup without programs.
    let json = if out.trim().is_empty() { "[]" } else { &out };
    Ok(serde_json::from_str(json)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_are_per_program_and_programs_new_since_count_from_zero() {
        let rt = |runs, ns| RunTime { runs, ns };
        let before = BTreeMap::from([("a".to_string(), rt(10, 1_000))]);
        let after = BTreeMap::from([("a".to_string(), rt(15, 1_600)), ("b".into(), rt(2, 90))]);
        let d = delta(&before, &after);
        assert_eq!(d["a"], rt(5, 600));
        assert_eq!(d["b"], rt(2, 90));
        assert_eq!(d["a"].per_run_ns(), Some(120.0));
        assert_eq!(RunTime::default().per_run_ns(), None);
    }
}
