//! docs/lab.md: how it was measured, the targets met or not, and the figures per phase.

use std::fmt::Write as _;

use super::{
    figures::{self, PhaseFigures},
    limiter::Limiter,
    pgbench::{self, PgRun},
    phases::{Phase, Phases},
    rig::{self, RigRun},
    upstream,
};
use crate::bench::machine::{command_line, Machine};
use crate::bench::stats::median;

pub struct Pictures {
    pub rig: String,
    pub pgbench: String,
}

pub struct Report<'a> {
    pub machine: Machine,
    pub command: String,
    pub pgbench_version: String,
    pub rig_phases: Phases,
    pub pg_phases: Phases,
    pub rig: &'a [RigRun],
    pub pgbench: &'a [PgRun],
    pub pictures: Pictures,
}

/// Incident goodput must reach this share of what the upstream can serve.
const INCIDENT_GOODPUT: f64 = 0.9;
/// p99 of admitted requests, as a multiple of the upstream's service time.
const P99_OVER_SERVICE: f64 = 1.3;
const RECOVERY_S: f64 = 5.0;
/// The incident's targets are judged from this far into it, as the simulator judges its
/// incident scenario: at the step, every request in flight waits out the slow service
/// time whatever any limit does, and the first slow answers take that long to arrive.
const SETTLE_S: f64 = 10.0;
/// pgbench's throughput with the limiter against without it.
const PGBENCH_TPS: f64 = 0.97;

/// One run's figures, worked out once.
struct RigFigures<'a> {
    run: &'a RigRun,
    phases: Vec<(Phase, PhaseFigures)>,
    /// The incident from [`SETTLE_S`] on.
    settled: PhaseFigures,
    recovery_s: Option<f64>,
}

impl<'a> RigFigures<'a> {
    fn new(run: &'a RigRun) -> Self {
        let phases: Vec<(Phase, PhaseFigures)> = Phase::ALL
            .into_iter()
            .map(|p| {
                (
                    p,
                    figures::phase(&run.requests, &run.ticks, run.phases.window(p)),
                )
            })
            .collect();
        let total = run.phases.total().as_secs_f64();
        let goodput = figures::per_second(&run.requests, 200, total);
        let restore = run.phases.window(Phase::Recovery).0;
        let recovery_s = figures::recovery_s(&goodput, restore, phases[0].1.goodput);
        let (start, end) = run.phases.window(Phase::Incident);
        let settled = figures::phase(
            &run.requests,
            &run.ticks,
            ((start + SETTLE_S).min(end), end),
        );
        RigFigures {
            run,
            phases,
            settled,
            recovery_s,
        }
    }

    fn of(&self, phase: Phase) -> &PhaseFigures {
        &self.phases[phase as usize].1
    }

    /// What the limiter turned away (prod) or would have (shadow) in `phase`.
    fn shed(&self, phase: Phase) -> Option<u64> {
        self.shed_in(self.of(phase))
    }

    fn shed_in(&self, f: &PhaseFigures) -> Option<u64> {
        match self.run.limiter {
            Limiter::None => None,
            Limiter::Prod => f.shed,
            Limiter::Shadow => f.would_shed,
        }
    }

    /// The phases' rows, the incident's followed by its part from [`SETTLE_S`] on.
    fn rows(&self) -> Vec<(String, &PhaseFigures)> {
        let mut rows = Vec::new();
        for (phase, p) in &self.phases {
            rows.push((phase.label().to_string(), p));
            if *phase == Phase::Incident {
                rows.push((format!("incident from {SETTLE_S:.0} s in"), &self.settled));
            }
        }
        rows
    }
}

fn verdict(met: bool, value: String) -> String {
    if met {
        format!("met ({value})")
    } else {
        format!("**not met** ({value})")
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

impl Report<'_> {
    pub fn render(&self) -> String {
        let rig: Vec<RigFigures> = self.rig.iter().map(RigFigures::new).collect();
        let mut out = String::new();
        self.render_header(&mut out);
        self.render_targets(&mut out, &rig);
        self.render_rig(&mut out, &rig);
        self.render_pgbench(&mut out);
        self.render_reading(&mut out);
        render_running(&mut out);
        out
    }

    fn render_header(&self, out: &mut String) {
        let m = &self.machine;
        let secs = |p: &Phases, phase| p.duration(phase).as_secs();
        let version = |program, args| command_line(program, args).unwrap_or_default();
        let _ = write!(
            out,
            "# The lab: the limiter on real traffic\n\n\
             Written by `{command}`, which replaces this file on every run; the figures are what \
             that run measured. Unmodified programs from Debian's packages, with configurations \
             of the lab's own:\n\n\
             - **nginx rig.** nginx ({nginx}, {workers} workers, a new upstream connection per \
             request, `proxy_read_timeout {timeout}s`) in a cgroup of its own, which the limiter \
             protects; it proxies to an HTTP upstream with {upstream_workers} workers (connections \
             beyond them wait in its listen queue) in a network namespace of its own, reached over \
             a veth pair. wrk ({wrk}) runs outside that cgroup with {clients} keep-alive \
             connections and {think} ms of think time between a response and the next request. \
             Phases: healthy ({h} s at {healthy_ms} ms of service time), incident ({i} s at \
             {slow_ms} ms: the upstream's own dependency slowed, its workers are all there), \
             recovery ({r} s at {healthy_ms} ms). Runs, in order: {rig_runs}; each with the \
             limiter's defaults and a fresh nginx.\n\
             - **pgbench.** {pgbench} with a connection per transaction (`-C`, {pg_clients} \
             clients) in a cgroup of its own, against a PostgreSQL cluster the lab makes with \
             initdb and runs on a loopback port. Each transaction is `SELECT pg_sleep(d)`: d is 0 \
             for {ph} s, {pg_slow} ms for {pi} s, 0 for {pr} s. Every run has a twin: the same \
             pgbench at the same time against the same address, in a cgroup without the limiter, \
             so that both meet the machine as it is at that moment; connections held are the \
             limited run's own. Runs, in order: {pg_runs}; each is judged by its tps against its twin's, \
             each kind by the median of those ratios.\n\n\
             The limit, the limiter's in-flight count and its counters were read with \
             `limiter-user status --json` every {period} ms; connections held to the upstream \
             from the kernel's socket table; requests from nginx's access log.\n\n\
             **Measured:** {date}, commit {commit}, on {cpus} CPUs ({model}, {memory}), kernel \
             {kernel}. The machine was shared with other work while the lab ran (idle {idle_before:.0} % \
             in the second before, {idle_after} after): the figures are noisy, and a second run \
             gives different ones.\n\n",
            command = self.command,
            rig_runs = run_order(self.rig.iter().map(|r| r.limiter)),
            pg_runs = run_order(self.pgbench.iter().map(|r| r.limiter)),
            nginx = version("nginx", &["-v"]),
            workers = rig::NGINX_WORKERS,
            timeout = rig::READ_TIMEOUT.as_secs(),
            upstream_workers = upstream::WORKERS,
            wrk = version("wrk", &["-v"]),
            clients = rig::CLIENTS,
            think = rig::THINK.as_millis(),
            h = secs(&self.rig_phases, Phase::Healthy),
            i = secs(&self.rig_phases, Phase::Incident),
            r = secs(&self.rig_phases, Phase::Recovery),
            healthy_ms = upstream::HEALTHY.as_millis(),
            slow_ms = upstream::SLOW.as_millis(),
            pgbench = self.pgbench_version,
            pg_clients = pgbench::CLIENTS,
            ph = secs(&self.pg_phases, Phase::Healthy),
            pi = secs(&self.pg_phases, Phase::Incident),
            pr = secs(&self.pg_phases, Phase::Recovery),
            pg_slow = pgbench::SLOW_QUERY.as_millis(),
            period = super::phases::SAMPLE_PERIOD.as_millis(),
            date = m.date,
            commit = m.commit,
            cpus = m.cpus,
            model = m.cpu_model,
            memory = m.memory,
            kernel = m.kernel,
            idle_before = m.idle_before,
            idle_after = m
                .idle_after
                .map_or("-".into(), |v| format!("{v:.0} %")),
        );
    }

    fn render_targets(&self, out: &mut String, rig: &[RigFigures]) {
        let capacity = upstream::capacity(upstream::SLOW);
        let _ = writeln!(out, "## Targets\n");
        let _ = write!(out, "| target |");
        for f in rig {
            let _ = write!(out, " {} |", f.run.limiter.label());
        }
        let _ = write!(out, "\n|---|");
        for _ in rig {
            let _ = write!(out, "---|");
        }
        let _ = writeln!(out);
        let row = |out: &mut String, name: String, cell: &dyn Fn(&RigFigures) -> String| {
            let _ = write!(out, "| {name} |");
            for f in rig {
                let _ = write!(out, " {} |", cell(f));
            }
            let _ = writeln!(out);
        };
        row(
            out,
            "0 shed while healthy (shadow: would_shed)".into(),
            &|f| match f.shed(Phase::Healthy) {
                None => "n/a".into(),
                Some(n) => verdict(n == 0, n.to_string()),
            },
        );
        row(
            out,
            format!(
                "incident goodput from {SETTLE_S:.0} s in >= {:.0} % of the upstream's capacity \
                 ({capacity:.1}/s)",
                INCIDENT_GOODPUT * 100.0
            ),
            &|f| {
                let (g, whole) = (f.settled.goodput, f.of(Phase::Incident).goodput);
                verdict(
                    g >= INCIDENT_GOODPUT * capacity,
                    format!("{g:.1}/s; whole phase {whole:.1}/s"),
                )
            },
        );
        let p99 =
            |service: std::time::Duration, judged: &PhaseFigures, whole: Option<&PhaseFigures>| {
                let bound = P99_OVER_SERVICE * service.as_secs_f64() * 1e3;
                let Some(p99) = judged.p99_ms else {
                    return "no requests".to_string();
                };
                let also = whole
                    .and_then(|w| w.p99_ms)
                    .map_or(String::new(), |w| format!("; whole phase {w:.0} ms"));
                verdict(p99 <= bound, format!("{p99:.0} ms{also}"))
            };
        row(
            out,
            format!(
                "p99 of admitted requests, healthy, <= {P99_OVER_SERVICE} x {} ms",
                upstream::HEALTHY.as_millis()
            ),
            &|f| p99(upstream::HEALTHY, f.of(Phase::Healthy), None),
        );
        row(
            out,
            format!(
                "p99 of admitted requests, incident from {SETTLE_S:.0} s in, <= \
                 {P99_OVER_SERVICE} x {} ms",
                upstream::SLOW.as_millis()
            ),
            &|f| p99(upstream::SLOW, &f.settled, Some(f.of(Phase::Incident))),
        );
        row(
            out,
            format!("recovery <= {RECOVERY_S} s"),
            &|f| match f.recovery_s {
                None => "**not met** (not within the recovery phase)".into(),
                Some(s) => verdict(s <= RECOVERY_S, format!("{s:.0} s")),
            },
        );
        let _ = writeln!(out);
        // Each pgbench run is judged against its twin, which ran beside it without the
        // limiter; the runs of a kind by the median of their ratios.
        for kind in Limiter::kinds(self.pgbench.iter().map(|r| r.limiter)) {
            let runs: Vec<&PgRun> = self.pgbench.iter().filter(|r| r.limiter == kind).collect();
            let ratios: Vec<f64> = runs.iter().map(|r| r.tps_ratio()).collect();
            let ratio = median(&ratios);
            let listed = ratios
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(", ");
            let count = format!(
                "{} run{}",
                runs.len(),
                if runs.len() == 1 { "" } else { "s" }
            );
            if kind == Limiter::None {
                let _ = writeln!(
                    out,
                    "pgbench, {} ({count}): tps against its twin's {ratio:.3} ({listed}): the \
                     measurement's own spread.\n",
                    kind.label(),
                );
                continue;
            }
            let aborted: usize = runs.iter().map(|r| r.limited.aborted.len()).sum();
            let _ = writeln!(
                out,
                "pgbench, {} ({count}): 0 aborted clients: {}; median tps >= {PGBENCH_TPS} x \
                 its twin's without a limiter: {}.\n",
                kind.label(),
                verdict(aborted == 0, format!("{aborted} aborted")),
                verdict(ratio >= PGBENCH_TPS, format!("{ratio:.3} ({listed})")),
            );
        }
    }

    fn render_rig(&self, out: &mut String, rig: &[RigFigures]) {
        if rig.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "## nginx rig\n\n![limit, in-flight and goodput over time]({})\n",
            self.pictures.rig
        );
        for f in rig {
            let shed = match f.run.limiter {
                Limiter::Shadow => "would_shed",
                _ => "shed",
            };
            let _ = writeln!(
                out,
                "### {}\n\n\
                 | phase | goodput /s | p50 ms | p99 ms | 502 /s | 504 /s | held to upstream (mean / max) | {shed} | limit (min - max) |\n\
                 |---|---|---|---|---|---|---|---|---|",
                f.run.limiter.label()
            );
            for (label, p) in f.rows() {
                let _ = writeln!(
                    out,
                    "| {} | {:.1} | {} | {} | {:.1} | {:.1} | {:.1} / {} | {} | {} |",
                    label,
                    p.goodput,
                    ms(p.p50_ms),
                    ms(p.p99_ms),
                    p.bad_gateway_per_s,
                    p.timeout_per_s,
                    p.held_mean,
                    p.held_max,
                    f.shed_in(p).map_or("-".into(), |n| n.to_string()),
                    p.limit_range
                        .map_or("-".into(), |(lo, hi)| format!("{lo} - {hi}")),
                );
            }
            let e = &f.run.wrk.errors;
            let _ = writeln!(
                out,
                "\nRecovery: {}. wrk: {} responses, socket errors: connect {}, read {}, write {}, \
                 timeout {}.\n",
                f.recovery_s.map_or(
                    "goodput not back within the recovery phase".into(),
                    |s| format!("{s:.0} s to goodput back at 90 % of healthy")
                ),
                f.run.wrk.requests,
                e.connect,
                e.read,
                e.write,
                e.timeout
            );
        }
    }

    fn render_pgbench(&self, out: &mut String) {
        if self.pgbench.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "## pgbench\n\n![limit, in-flight and throughput over time]({})\n\n\
             | run | tps | twin's tps | ratio | tps healthy / slow / recovery | transactions | aborted clients (twin's) | shed | limit (min - max) |\n\
             |---|---|---|---|---|---|---|---|---|",
            self.pictures.pgbench
        );
        for run in self.pgbench {
            let tps_in = |phase| {
                let (from, to) = run.phases.window(phase);
                let inside: Vec<f64> = run
                    .limited
                    .progress
                    .iter()
                    .filter(|(at, _)| *at > from && *at <= to)
                    .map(|(_, tps)| *tps)
                    .collect();
                format!(
                    "{:.0}",
                    inside.iter().sum::<f64>() / inside.len().max(1) as f64
                )
            };
            let whole = figures::phase(&[], &run.ticks, (0.0, f64::INFINITY));
            let _ = writeln!(
                out,
                "| {} | {:.1} | {:.1} | {:.3} | {} / {} / {} | {} | {} ({}) | {} | {} |",
                run.limiter.label(),
                run.limited.tps,
                run.twin.tps,
                run.tps_ratio(),
                tps_in(Phase::Healthy),
                tps_in(Phase::Incident),
                tps_in(Phase::Recovery),
                run.limited.transactions,
                run.limited.aborted.len(),
                run.twin.aborted.len(),
                whole.shed.map_or("-".into(), |n| n.to_string()),
                whole
                    .limit_range
                    .map_or("-".into(), |(lo, hi)| format!("{lo} - {hi}")),
            );
        }
        for run in self.pgbench {
            for (whose, summary) in [("", &run.limited), (", its twin", &run.twin)] {
                if !summary.abort_lines.is_empty() {
                    let _ = writeln!(
                        out,
                        "\npgbench said ({}{whose}):\n\n```\n{}\n```",
                        run.limiter.label(),
                        summary.abort_lines.join("\n")
                    );
                }
            }
        }
        let _ = writeln!(out);
    }

    fn render_reading(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "## Reading the figures\n\n\
             - Goodput: 200 answers per second, by the second nginx logged them. The upstream can \
             serve {workers} / service time: {healthy:.0}/s healthy, {slow:.1}/s in the incident; \
             wrk asks for about {clients} / (think time + response time).\n\
             - p50 and p99 are nginx's request times over the requests it gave the upstream \
             (everything but its 502s, which is what it answers when the limiter refuses the \
             connect); a 504 counts at the {timeout} s it waited.\n\
             - Held to upstream: TCP connections from nginx's namespace to the upstream, \
             connecting, established or closed by the upstream and not yet by nginx, whether a \
             limiter runs or not.\n\
             - Incident from {settle:.0} s in: the incident's targets are judged there, as the \
             simulator judges its incident scenario. At the step every request in flight \
             waits out the slow service time whatever a limit does, and with nginx's {timeout} s \
             timeout the first of them end as 504s; the whole phase's figures are shown beside \
             them.\n\
             - Recovery: from the upstream's restore to the end of the first second from which \
             goodput stays at {recovered:.0} % of the healthy phase's for {hold} s, in whole seconds.\n\
             - Shed and would_shed: the limiter's own counters, over the phase.\n\
             - With no limiter, the incident's {clients} connections meet {workers} workers: nginx \
             gives up after {timeout} s (504) while the requests it abandoned still wait in the \
             upstream's listen queue and are served later, for nobody. Goodput then falls far \
             below the upstream's capacity; a limit near its workers' count would serve it.\n\
             - In-flight above the workers costs the incident's p99 a whole service time: the \
             upstream sleeps exactly {slow_ms} ms, and its {workers} workers, all started by the \
             incident's first requests at once, stay in step, answering together and taking the \
             next {workers} connections from the listen queue together. A connection beyond the \
             {workers} waits for the next round, so at a limit of {workers} + k, k of each \
             round's {workers} answers take up to twice the service time, and a p99 within 1.3x \
             it needs the limit at or under the workers. The limiter counts the workers from \
             those waits and holds the limit there once it follows the slowdown (docs/control.md, \
             workers that answer in step). An upstream whose service times vary falls out of \
             step, and a queue of k waits about k / {workers} of a service time.",
            slow_ms = upstream::SLOW.as_millis(),
            workers = upstream::WORKERS,
            healthy = upstream::capacity(upstream::HEALTHY),
            slow = upstream::capacity(upstream::SLOW),
            clients = rig::CLIENTS,
            timeout = rig::READ_TIMEOUT.as_secs(),
            recovered = figures::RECOVERED * 100.0,
            settle = SETTLE_S,
            hold = figures::RECOVERED_FOR_S,
        );
    }
}

fn render_running(out: &mut String) {
    let _ = writeln!(
        out,
        "\n## Running it\n\n\
         As root:\n\n\
         ```sh\n\
         sudo apt-get install -y clang libbpf-dev bpftool iproute2 nginx wrk postgresql && sudo -E env \"PATH=$PATH\" cargo xtask lab\n\
         ```\n\n\
         It builds the agent in release, takes about fourteen minutes with the default phases \
         (`--healthy`, `--incident`, `--recovery` and `--pgbench-phase` set them, in seconds), \
         and replaces this file and its pictures (`--out` writes them elsewhere). nginx, wrk, \
         PostgreSQL and pgbench are started by the lab with configurations of its own, never as \
         the system's services. pgbench runs three times, once with no limiter and twice with \
         it in prod, each time beside a twin without the limiter: its tps varies by a fifth \
         from one run to the next here and drifts over a series of runs (by a third over six), \
         while two runs at the same time agree to well under 1 %, which the run with no \
         limiter shows. `--series DIR` also writes every run's readings as CSV, and every \
         window the agent closed as a JSON line (`*-windows.jsonl`: the window's latencies, \
         in-flight and throughput, the service time and capacity it followed, and the limit \
         before and after it), to read why a limit moved. Every process, cgroup, network namespace, veth pair, temporary \
         directory and pin it makes is removed however it ends (an error, Ctrl-C, SIGTERM), \
         though not when it is killed with SIGKILL: then `limiter-test-lab-*` cgroups and a \
         `limiter-test-*` namespace may be left. `cargo xtask lab --smoke` runs \
         every run once for a few seconds with the debug build, and \
         `xtask/tests/lab_smoke.rs` runs that in the test suite; the full lab is not part of it."
    );
}

/// The runs' kinds, in the order they ran.
fn run_order(runs: impl Iterator<Item = Limiter>) -> String {
    let labels: Vec<_> = runs.map(Limiter::label).collect();
    if labels.is_empty() {
        "none".into()
    } else {
        labels.join(", ")
    }
}
