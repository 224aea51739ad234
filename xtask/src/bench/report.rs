//! The results as Markdown, and their place in docs/benchmarks.md.

use std::fmt::Write as _;

use super::{
    agent_cost,
    connect::{self, ConnectResults},
    control,
    http::{self, HttpResults},
    kernel::KernelResults,
    machine::Machine,
};

pub enum Outcome<T> {
    Measured(T),
    Skipped(String),
}

pub struct Report {
    pub machine: Machine,
    pub command: String,
    pub connect: ConnectResults,
    pub http: Outcome<HttpResults>,
    pub kernel: KernelResults,
    pub agent: Vec<agent_cost::Row>,
    pub control: Outcome<Vec<control::Figure>>,
}

const BEGIN: &str = "<!-- results: written by `cargo xtask bench`, replaced on every run -->";
const END: &str = "<!-- end of results -->";

/// Puts `generated` between the markers of `existing`, keeping everything around them.
pub fn splice(existing: Option<&str>, generated: &str) -> String {
    let block = format!("{BEGIN}\n{generated}{END}\n");
    let Some(text) = existing else {
        return format!("# Benchmarks\n\n{block}");
    };
    match (text.find(BEGIN), text.find(END)) {
        (Some(b), Some(e)) if b < e => {
            format!(
                "{}{block}{}",
                &text[..b],
                text[e + END.len()..].trim_start_matches('\n')
            )
        }
        _ => format!("{}\n{block}", text.trim_end()),
    }
}

impl Report {
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_header(&mut out);
        self.render_targets(&mut out);
        self.render_connect(&mut out);
        self.render_http(&mut out);
        render_kernel(&self.kernel, &mut out);
        render_agent(&self.agent, &mut out);
        self.render_control(&mut out);
        out
    }

    fn render_header(&self, out: &mut String) {
        let m = &self.machine;
        out.push_str("| | |\n|---|---|\n");
        for (k, v) in [
            ("date", m.date.clone()),
            ("command", format!("`{}`", self.command)),
            ("commit", m.commit.clone()),
            (
                "machine",
                format!(
                    "{} CPUs ({}), {} memory, Linux {}",
                    m.cpus, m.cpu_model, m.memory, m.kernel
                ),
            ),
            (
                "CPU idle in the second before / after the run",
                format!(
                    "{:.0} % / {}",
                    m.idle_before,
                    m.idle_after.map_or("-".into(), |i| format!("{i:.0} %"))
                ),
            ),
        ] {
            let _ = writeln!(out, "| {k} | {v} |");
        }
        out.push('\n');
    }

    fn render_targets(&self, out: &mut String) {
        out.push_str("### Targets\n\n| target | measured | |\n|---|---|---|\n");
        for (target, measured, verdict) in self.targets() {
            let verdict = match verdict {
                Some(true) => "met",
                Some(false) => "**not met**",
                None => "not measured",
            };
            let _ = writeln!(out, "| {target} | {measured} | {verdict} |");
        }
        out.push('\n');
    }

    /// (target, what was measured, whether it was reached).
    pub fn targets(&self) -> Vec<(String, String, Option<bool>)> {
        let mut rows = Vec::new();
        for (condition, percent) in [
            (connect::Condition::GenerousLimit, 5),
            (connect::Condition::Unlimited, 2),
        ] {
            let r = self.connect.ratio(condition);
            rows.push((
                format!(
                    "connect+close, {}: within {percent} % of no programs",
                    condition.label()
                ),
                format!("{r:.3} x"),
                Some(r <= 1.0 + f64::from(percent) / 100.0),
            ));
        }
        match &self.http {
            Outcome::Measured(h) => {
                let limiter = h.row(http::Condition::Limiter).requests_per_second;
                let none = h.row(http::Condition::NoLimiter).requests_per_second;
                let proxy = h.row(http::Condition::Proxy).requests_per_second;
                rows.push((
                    "keep-alive throughput, limiter: within 3 % of no programs".into(),
                    format!("{:.3} x", limiter / none),
                    Some(limiter / none >= 0.97),
                ));
                rows.push((
                    "keep-alive throughput, limiter: at least 1.5 x the egress proxy".into(),
                    format!("{:.2} x", limiter / proxy),
                    Some(limiter / proxy >= 1.5),
                ));
            }
            Outcome::Skipped(_) => {
                for t in [
                    "within 3 % of no programs",
                    "at least 1.5 x the egress proxy",
                ] {
                    rows.push((format!("keep-alive throughput: {t}"), "-".into(), None));
                }
            }
        }
        for (workload, budget) in [
            ("keep-alive HTTP (wrk, nginx)", 250.0),
            ("connect+close, admitted", 700.0),
        ] {
            let k = &self.kernel;
            if let Some(w) = k.workloads.iter().find(|w| w.name == workload) {
                let per_unit = w.ns_per_unit();
                rows.push((
                    format!(
                        "BPF time per {}, all programs ({workload}): at most {budget:.0} ns",
                        w.unit
                    ),
                    format!(
                        "{per_unit:.0} ns ({:.0} ns net of the statistics' own cost)",
                        k.net_ns_per_unit(w)
                    ),
                    Some(per_unit <= budget),
                ));
            }
        }
        for row in self
            .agent
            .iter()
            .filter(|r| r.destinations > 0 || r.seen_once > 0)
        {
            rows.push((
                format!("agent CPU, {}: under 1 % of a core", row.label),
                format!("{:.2} %", row.cpu_percent),
                Some(row.cpu_percent < 1.0),
            ));
        }
        for row in self.agent.iter().filter(|r| r.seen_once > 0) {
            rows.push((
                format!("agent resident memory, {}: under 64 MiB", row.label),
                mib(row.resident_bytes),
                Some(row.resident_bytes < 64 << 20),
            ));
        }
        match &self.control {
            Outcome::Measured(figures) => {
                let worst = figures
                    .iter()
                    .filter(|f| f.name.starts_with("update"))
                    .max_by(|a, b| a.ns.total_cmp(&b.ns));
                if let Some(w) = worst {
                    rows.push((
                        "control crate: under 1 µs per update".into(),
                        format!("{} ({})", ns(w.ns), w.name),
                        Some(w.ns < 1000.0),
                    ));
                }
            }
            Outcome::Skipped(_) => rows.push((
                "control crate: under 1 µs per update".into(),
                "-".into(),
                None,
            )),
        }
        rows
    }

    fn render_connect(&self, out: &mut String) {
        let c = &self.connect;
        let per_condition = c.rows.first().map_or(0, |r| r.connections);
        let _ = writeln!(
            out,
            "### connect+close\n\n{} connections per condition, in {} rounds taking turns; \
             each is `socket`, `connect`, `close` (SO_LINGER 0), timed one by one.\n",
            group(per_condition as f64),
            c.rounds
        );
        out.push_str(
            "| condition | median per connection | rounds (min - max) | p99 | median vs no programs |\n\
             |---|---|---|---|---|\n",
        );
        for row in &c.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} - {} | {} | {:.3} x |",
                row.condition.label(),
                ns(row.median_ns as f64),
                ns(row.round_medians.0 as f64),
                ns(row.round_medians.1 as f64),
                ns(row.p99_ns as f64),
                c.ratio(row.condition)
            );
        }
        out.push('\n');
    }

    fn render_http(&self, out: &mut String) {
        out.push_str("### Keep-alive HTTP\n\n");
        let h = match &self.http {
            Outcome::Measured(h) => h,
            Outcome::Skipped(why) => {
                let _ = writeln!(out, "Skipped: {why}.\n");
                return;
            }
        };
        let _ = writeln!(
            out,
            "wrk ({} thread, {} keep-alive connections) in the cgroup against nginx (one \
             worker) outside it, {} rounds of {} s taking turns; medians over the rounds. \
             {}.\n",
            h.threads,
            h.connections,
            h.rounds,
            h.seconds,
            h.tools.join("; ")
        );
        out.push_str(
            "| condition | requests/s | rounds (min - max) | p50 | p99 | requests/s vs no programs | p50 vs no programs | p99 vs no programs | agent CPU (% of a core) |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        let base = h.row(http::Condition::NoLimiter);
        for row in &h.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} - {} | {} | {} | {:.3} x | {:.2} x | {:.2} x | {} |",
                row.condition.label(),
                group(row.requests_per_second),
                group(row.rps_range.0),
                group(row.rps_range.1),
                ns(row.p50_us * 1e3),
                ns(row.p99_us * 1e3),
                row.requests_per_second / base.requests_per_second,
                row.p50_us / base.p50_us,
                row.p99_us / base.p99_us,
                row.agent_cpu_percent
                    .map_or("-".into(), |c| format!("{c:.1}"))
            );
        }
        let limiter = h.row(http::Condition::Limiter).requests_per_second;
        let proxy = h.row(http::Condition::Proxy).requests_per_second;
        let _ = writeln!(
            out,
            "\nLimiter vs egress proxy: {:.2} x the requests/s.\n",
            limiter / proxy
        );
    }

    fn render_control(&self, out: &mut String) {
        out.push_str("### The control crate\n\n");
        match &self.control {
            Outcome::Measured(figures) => {
                out.push_str(
                    "criterion, `cargo bench -p limiter-core --bench controller` \
                     (limiter-core/benches/controller.rs).\n\n\
                     | benchmark | time |\n|---|---|\n",
                );
                for f in figures {
                    let _ = writeln!(out, "| {} | {} |", f.name, ns(f.ns));
                }
                out.push('\n');
            }
            Outcome::Skipped(why) => {
                let _ = writeln!(out, "Skipped: {why}.\n");
            }
        }
    }
}

pub fn render_kernel(kernel: &KernelResults, out: &mut String) {
    let _ = writeln!(
        out,
        "### Kernel run time per program invocation\n\n\
         From the kernel's BPF run-time statistics (on only for this part: they cost \
         time themselves), limiter in prod. The statistics read the clock around every run, \
         and count that in: a program that does nothing is measured at {:.0} ns a run here \
         (BPF_PROG_TEST_RUN of an empty program), which the last column takes off every run.\n\n\
         | workload | program | runs | ns per run | net of the statistics |\n|---|---|---|---|---|",
        kernel.empty_run_ns
    );
    for w in &kernel.workloads {
        for (name, rt) in &w.programs {
            let per_run = rt.per_run_ns().map_or("-".into(), |v| format!("{v:.0}"));
            let net = rt
                .per_run_ns()
                .map_or("-".into(), |v| format!("{:.0}", v - kernel.empty_run_ns));
            let _ = writeln!(
                out,
                "| {} | {name} | {} | {per_run} | {net} |",
                w.name,
                group(rt.runs as f64)
            );
        }
        let _ = writeln!(
            out,
            "| {} | **all programs, per {}** | {} {}s, {:.1} runs each | **{:.0}** | **{:.0}** |",
            w.name,
            w.unit,
            group(w.units as f64),
            w.unit,
            w.runs_per_unit(),
            w.ns_per_unit(),
            kernel.net_ns_per_unit(w)
        );
    }
    out.push('\n');
}

pub fn render_agent(agent: &[agent_cost::Row], out: &mut String) {
    out.push_str(
        "### The agent\n\n\
         CPU from /proc/PID/stat (user + system) over the interval, resident memory \
         (VmRSS) at its end; request/response exchanges on keep-alive connections from \
         inside the cgroup, one latency sample each; default settings (prod, default \
         algorithm and limits). A destination seen once had one connection (connect, then \
         close) before the measurement; those runs size the kernel's table for 131 072 \
         destinations (`--max-destinations`) so that none is turned away.\n\n\
         | load | seen once before | destinations with traffic | connections | samples/s | CPU (% of a core) | resident | destinations in status |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in agent {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.2} | {} | {} |",
            r.label,
            group(r.seen_once as f64),
            group(r.destinations as f64),
            group(r.connections as f64),
            group(r.samples_per_second),
            r.cpu_percent,
            mib(r.resident_bytes),
            group(r.tracked as f64)
        );
    }
    out.push('\n');
}

/// 10000 as "10 000".
pub fn group(n: f64) -> String {
    let digits = format!("{n:.0}");
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// Nanoseconds in the unit that keeps three significant figures readable.
fn ns(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.2} ms", v / 1e6),
        v if v >= 1e3 => format!("{:.1} µs", v / 1e3),
        v => format!("{v:.0} ns"),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_block_replaces_only_what_is_between_the_markers() {
        let first = splice(None, "one\n");
        assert!(first.starts_with("# Benchmarks\n"));
        let edited = format!("{first}\n## How to read this\nprose\n");
        let second = splice(Some(&edited), "two\n");
        assert!(second.contains("two\n") && !second.contains("one\n"));
        assert!(second.ends_with("## How to read this\nprose\n"));
        assert_eq!(second.matches(BEGIN).count(), 1);
    }

    #[test]
    fn a_file_without_markers_keeps_its_text_and_gets_the_block_at_the_end() {
        let out = splice(Some("# Mine\n"), "figures\n");
        assert!(out.starts_with("# Mine\n"));
        assert!(out.trim_end().ends_with(END));
    }

    #[test]
    fn thousands_are_grouped_and_times_get_a_unit() {
        assert_eq!(group(10_000.0), "10 000");
        assert_eq!(group(999.4), "999");
        assert_eq!(group(1_234_567.0), "1 234 567");
        assert_eq!(ns(950.0), "950 ns");
        assert_eq!(ns(21_340.0), "21.3 µs");
        assert_eq!(ns(2_500_000.0), "2.50 ms");
    }
}
