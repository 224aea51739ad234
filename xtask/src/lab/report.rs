//! docs/lab.md: how it was measured, the targets met or not, and the figures per phase.

use std::fmt::Write as _;

use super::{
    figures::{self, PhaseFigures},
    limiter::Limiter,
    open_loop::{self, OpenLoopRun},
    pgbench::{self, PgRun},
    phases::{Phase, Phases},
    rig::{self, RigRun},
    shape::{RigShape, Servers},
};
use crate::bench::machine::{command_line, Machine};
use crate::bench::stats::median;
use crate::client::Fate;
// The simulator's criteria for shapes (docs/simulation.md, "Criteria"), the lab's too: a
// saturated upstream's goodput must reach a share of what it can serve and its twin's
// (less the draws' noise), one with workers to spare a share of its twin's, judged from
// a while after the step (longer with workers to spare), and refusals must stop soon
// after the restore.
use limiter_sim::shapes::judge::{
    GOODPUT_OF_CAPACITY as SATURATED_GOODPUT, LATE_S as SETTLE_SPARE_S, RECOVERED_S as RECOVERY_S,
    SAME_WITHIN as TWIN_SLACK, SETTLE_S, SPARE_OF_TWIN as SPARE_GOODPUT,
};

pub struct Pictures {
    /// One per shape, in the order they ran.
    pub rig: Vec<(RigShape, String)>,
    pub open_loop: String,
    pub pgbench: String,
}

pub struct Report<'a> {
    pub machine: Machine,
    pub command: String,
    pub pgbench_version: String,
    pub rig_phases: Phases,
    pub pg_phases: Phases,
    pub rig: &'a [RigRun],
    pub open_loop: &'a [OpenLoopRun],
    pub pgbench: &'a [PgRun],
    pub pictures: Pictures,
}

/// pgbench's throughput with the limiter against without it.
const PGBENCH_TPS: f64 = 0.97;

/// One run's figures, worked out once.
struct RigFigures<'a> {
    run: &'a RigRun,
    phases: Vec<(Phase, PhaseFigures)>,
    /// The incident from [`RigFigures::settle_s`] on.
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
            ((start + settle_s(&run.shape)).min(end), end),
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
            Limiter::Prod | Limiter::Queue => f.shed,
            Limiter::Shadow => f.would_shed,
        }
    }

    /// The phases' rows, the incident's followed by its part from its settling time on.
    fn rows(&self) -> Vec<(String, &PhaseFigures)> {
        let mut rows = Vec::new();
        for (phase, p) in &self.phases {
            rows.push((phase.label().to_string(), p));
            if *phase == Phase::Incident {
                let settle = settle_s(&self.run.shape);
                rows.push((format!("incident from {settle:.0} s in"), &self.settled));
            }
        }
        rows
    }

    /// The simulator's criteria for the run's shape, each with its verdict, or `None` where
    /// it does not apply (what only a limiter does, or a comparison without a twin).
    fn criteria(&self, twin: Option<&RigFigures>) -> Vec<(String, Option<(bool, String)>)> {
        let shape = &self.run.shape;
        let limited = self.run.limiter != Limiter::None;
        let settle = settle_s(shape);
        let goodput = self.settled.goodput;
        let against_twin = |share: f64| {
            twin.filter(|_| limited).map(|t| {
                let theirs = t.settled.goodput;
                let against = format!("{goodput:.1}/s against {theirs:.1}/s");
                if theirs > 0.0 {
                    let ratio = goodput / theirs;
                    (ratio >= share, format!("{ratio:.2}: {against}"))
                } else {
                    (true, against)
                }
            })
        };
        let mut criteria = vec![(
            "healthy: refused".to_string(),
            self.shed(Phase::Healthy).map(|n| (n == 0, n.to_string())),
        )];
        if shape.saturated() {
            let capacity = shape.capacity(shape.slow);
            let service_p99 = shape.service_p99_ms(shape.slow);
            let bound = shape.p99_bound();
            criteria.push((
                format!("saturated: goodput from {settle:.0} s in >= {SATURATED_GOODPUT} x capacity ({capacity:.1}/s)"),
                Some((goodput >= SATURATED_GOODPUT * capacity, format!("{goodput:.1}/s"))),
            ));
            criteria.push((
                format!("saturated: p99 from {settle:.0} s in <= {bound} x the service's ({service_p99:.0} ms)"),
                Some(match self.settled.p99_ms {
                    None => (false, "no requests".into()),
                    Some(p99) => (p99 <= bound * service_p99, format!("{p99:.0} ms")),
                }),
            ));
            criteria.push((
                format!("saturated: goodput >= {} x the twin's", 1.0 - TWIN_SLACK),
                against_twin(1.0 - TWIN_SLACK),
            ));
        }
        if shape.spare() {
            criteria.push((
                format!("spare: goodput from {settle:.0} s in >= {SPARE_GOODPUT} x the twin's"),
                against_twin(SPARE_GOODPUT),
            ));
        }
        let restore = self.run.phases.window(Phase::Recovery).0 + RECOVERY_S;
        criteria.push((
            format!("recovery: refused from {RECOVERY_S} s after the restore"),
            self.shed_in(&figures::phase(
                &self.run.requests,
                &self.run.ticks,
                (restore, f64::INFINITY),
            ))
            .map(|n| (n == 0, n.to_string())),
        ));
        criteria.push((
            format!("recovery <= {RECOVERY_S} s"),
            Some(match self.recovery_s {
                None => (false, "not within the recovery phase".into()),
                Some(s) => (s <= RECOVERY_S, format!("{s:.0} s")),
            }),
        ));
        criteria
    }
}

fn settle_s(shape: &RigShape) -> f64 {
    if shape.spare() {
        SETTLE_SPARE_S
    } else {
        SETTLE_S
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
        self.render_open_loop(&mut out);
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
             protects; it proxies to an HTTP upstream in a network namespace of its own, reached \
             over a veth pair. wrk ({wrk}) runs outside that cgroup with keep-alive connections \
             and a think time between a response and the next request. Phases: healthy ({h} s), \
             incident ({i} s: the upstream's own dependency slowed, its servers are all there), \
             recovery ({r} s). The upstreams, each a shape of the simulator's \
             (docs/simulation.md, \"Shapes\") and judged by its criteria, are in the table \
             below. Runs on each, in order: {rig_runs}; each with the limiter's defaults and a \
             fresh nginx.\n\
             - **Open loop.** The production incident: a service in a cgroup of its own, which \
             the limiter protects, sends {rate} requests a second (Poisson arrivals, the lab's own \
             client, a connection per request, given up on after {open_timeout} s) straight to an \
             upstream with a thread for every connection, whatever the answers do. Its median \
             answer (lognormal, sigma {open_sigma}) is {open_healthy} ms while healthy, climbs to \
             {open_degraded} ms over the first half of the incident and holds there: slow, with \
             no error at all. Runs, in order: {open_runs}.\n\
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
            rig_runs = run_order(
                self.rig
                    .iter()
                    .filter(|r| Some(&r.shape) == self.shapes().first())
                    .map(|r| r.limiter)
            ),
            pg_runs = run_order(self.pgbench.iter().map(|r| r.limiter)),
            open_runs = run_order(self.open_loop.iter().map(|r| r.limiter)),
            rate = open_loop::RATE,
            open_timeout = open_loop::TIMEOUT.as_secs(),
            open_sigma = open_loop::SIGMA,
            open_healthy = open_loop::HEALTHY.as_millis(),
            open_degraded = open_loop::DEGRADED.as_millis(),
            nginx = version("nginx", &["-v"]),
            workers = rig::NGINX_WORKERS,
            timeout = rig::READ_TIMEOUT.as_secs(),
            wrk = version("wrk", &["-v"]),
            h = secs(&self.rig_phases, Phase::Healthy),
            i = secs(&self.rig_phases, Phase::Incident),
            r = secs(&self.rig_phases, Phase::Recovery),
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
        self.render_shapes(out);
    }

    /// The shapes the rig ran, in order.
    fn shapes(&self) -> Vec<RigShape> {
        let mut shapes: Vec<RigShape> = Vec::new();
        for run in self.rig {
            if !shapes.contains(&run.shape) {
                shapes.push(run.shape);
            }
        }
        shapes
    }

    fn render_shapes(&self, out: &mut String) {
        let shapes = self.shapes();
        if shapes.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "| shape | servers | service time (median, healthy -> incident) | wrk connections, think time | capacity healthy / incident | demand healthy / incident | incident |\n\
             |---|---|---|---|---|---|---|"
        );
        for shape in shapes {
            let servers = match shape.servers {
                Servers::Workers(n) => format!("{n} workers"),
                Servers::Cores(n) => format!("{n} cores shared (processor sharing)"),
                Servers::Unbounded => "a thread per connection".to_string(),
            };
            let service = if shape.sigma == 0.0 {
                "exact (a sleep)".to_string()
            } else {
                format!("lognormal, sigma {}", shape.sigma)
            };
            let kind = if shape.saturated() {
                "saturated"
            } else {
                "workers to spare"
            };
            let _ = writeln!(
                out,
                "| {} | {servers} | {} -> {} ms, {service} | {}, {} ms | {:.1}/s / {:.1}/s | {:.1}/s / {:.1}/s | {kind} |",
                shape.slug,
                shape.healthy.as_millis(),
                shape.slow.as_millis(),
                shape.clients,
                shape.think.as_millis(),
                shape.capacity(shape.healthy),
                shape.capacity(shape.slow),
                shape.demand(shape.healthy),
                shape.demand(shape.slow),
            );
        }
        let _ = writeln!(out);
    }

    fn render_targets(&self, out: &mut String, rig: &[RigFigures]) {
        let _ = writeln!(out, "## Targets\n");
        if let Some(first) = rig.first() {
            let columns: Vec<&RigFigures> = rig
                .iter()
                .filter(|f| f.run.shape == first.run.shape)
                .collect();
            let _ = write!(out, "| shape | criterion |");
            for f in &columns {
                let _ = write!(out, " {} |", f.run.limiter.label());
            }
            let _ = writeln!(out, "\n|---|---|{}", "---|".repeat(columns.len()));
            let mut met: Vec<usize> = vec![0; columns.len()];
            for shape in self.shapes() {
                let runs: Vec<&RigFigures> = rig.iter().filter(|f| f.run.shape == shape).collect();
                let twin = runs
                    .iter()
                    .copied()
                    .find(|f| f.run.limiter == Limiter::None);
                let judged: Vec<_> = runs.iter().map(|f| f.criteria(twin)).collect();
                for (i, j) in judged.iter().enumerate() {
                    met[i] += usize::from(j.iter().all(|(_, v)| v.as_ref().is_none_or(|v| v.0)));
                }
                for (row, (name, _)) in judged[0].iter().enumerate() {
                    let _ = write!(out, "| {} | {name} |", shape.slug);
                    for j in &judged {
                        let cell = match &j[row].1 {
                            None => "n/a".to_string(),
                            Some((ok, value)) => verdict(*ok, value.clone()),
                        };
                        let _ = write!(out, " {cell} |");
                    }
                    let _ = writeln!(out);
                }
            }
            let _ = write!(out, "| **all** | shapes meeting every criterion |");
            for m in met {
                let _ = write!(out, " {m} of {} |", self.shapes().len());
            }
            let _ = writeln!(out, "\n");
        }
        self.render_open_loop_targets(out);
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
        let _ = writeln!(out, "## nginx rig\n");
        for (shape, picture) in &self.pictures.rig {
            let _ = writeln!(
                out,
                "### {}: {}\n\n![limit, in-flight and goodput over time]({picture})\n",
                shape.slug,
                shape.describe()
            );
            let runs: Vec<&RigFigures> = rig.iter().filter(|f| f.run.shape == *shape).collect();
            render_runs(out, &runs);
        }
    }
}

fn render_runs(out: &mut String, rig: &[&RigFigures]) {
    for f in rig {
        let shed = match f.run.limiter {
            Limiter::Shadow => "would_shed",
            _ => "shed",
        };
        let _ = writeln!(
                out,
                "#### {}\n\n\
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

impl Report<'_> {
    /// The simulator's production criteria: nothing refused while healthy, the first
    /// refusal before a slow-call breaker watching the run with no limiter would open, and
    /// in-flight within `max`.
    fn render_open_loop_targets(&self, out: &mut String) {
        let runs = self.open_loop;
        if runs.is_empty() {
            return;
        }
        let breaker = runs
            .iter()
            .find(|r| r.limiter == Limiter::None)
            .and_then(OpenLoopRun::breaker_opens_s);
        let incident = |run: &OpenLoopRun| run.phases.window(Phase::Incident).0;
        let _ = write!(out, "| open loop | criterion |");
        for run in runs {
            let _ = write!(out, " {} |", run.limiter.label());
        }
        let _ = writeln!(out, "\n|---|---|{}", "---|".repeat(runs.len()));
        let row = |out: &mut String, name: String, cell: &dyn Fn(&OpenLoopRun) -> String| {
            let _ = write!(out, "| production | {name} |");
            for run in runs {
                let _ = write!(out, " {} |", cell(run));
            }
            let _ = writeln!(out);
        };
        row(out, "healthy: refused".into(), &|run| {
            if run.limiter == Limiter::None {
                return "n/a".into();
            }
            let n = run.refused_in(run.phases.window(Phase::Healthy));
            verdict(n == 0, n.to_string())
        });
        let breaker_text = breaker.map_or("never".into(), |b| {
            format!("{:.1} s", b - incident(&runs[0]))
        });
        row(
            out,
            format!("first refusal before a slow-call breaker would open on the run with no limiter ({breaker_text} into the incident)"),
            &|run| {
                if run.limiter != Limiter::Prod {
                    return "n/a".into();
                }
                match (run.first_refusal_s(), breaker) {
                    (None, _) => verdict(false, "none".into()),
                    (Some(first), b) => verdict(
                        b.is_none_or(|b| first < b),
                        format!("{:.1} s into the incident", first - incident(run)),
                    ),
                }
            },
        );
        let max = limiter_core::config::Limits::default().max as usize;
        row(out, format!("peak in-flight <= max ({max})"), &|run| {
            let peak = run.peak_in_flight();
            if run.limiter == Limiter::Prod {
                verdict(peak <= max, peak.to_string())
            } else {
                peak.to_string()
            }
        });
        let _ = writeln!(out);
    }

    fn render_open_loop(&self, out: &mut String) {
        if self.open_loop.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "## Open loop: the production incident\n\n![limit, in-flight and answers over time]({})\n\n\
             | run | sent | answered | refused (while healthy) | given up on | failed | p50 answered healthy / degraded | peak in-flight | shed | limit (min - max) |\n\
             |---|---|---|---|---|---|---|---|---|---|",
            self.pictures.open_loop
        );
        for run in self.open_loop {
            let count = |fate| run.sent.iter().filter(|s| s.fate == fate).count();
            let (start, end) = run.phases.window(Phase::Incident);
            let p50 = |window| {
                run.answered_p50_s(window)
                    .map_or("-".into(), |s| format!("{:.0} ms", s * 1e3))
            };
            let whole = figures::phase(&[], &run.ticks, (0.0, f64::INFINITY));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} ({}) | {} | {} | {} / {} | {} | {} | {} |",
                run.limiter.label(),
                run.sent.len(),
                count(Fate::Answered),
                count(Fate::Refused),
                run.refused_in(run.phases.window(Phase::Healthy)),
                count(Fate::TimedOut),
                count(Fate::Failed),
                p50(run.phases.window(Phase::Healthy)),
                p50(((start + end) / 2.0, end)),
                run.peak_in_flight(),
                whole.shed.map_or("-".into(), |n| n.to_string()),
                whole
                    .limit_range
                    .map_or("-".into(), |(lo, hi)| format!("{lo} - {hi}")),
            );
        }
        let _ = writeln!(
            out,
            "\nDegraded: the requests sent in the incident's second half, at the degraded median. \
             In-flight: requests connected and not yet answered or given up on, from the client's \
             own record. The breaker is the simulator's reference: it opens once at least half \
             of the calls that ended in the last 10 s took over 2 s.\n"
        );
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
             - Capacity: the upstream's servers over its mean service time (a lognormal's mean \
             is its median times e^(sigma^2 / 2)). Demand: wrk's connections over think time \
             plus mean service time, what they would ask with no wait. A shape is saturated when \
             demand in the incident is at least 1.1x the capacity, and has workers to spare at \
             most 0.8x, as the simulator's families say.\n\
             - Goodput: 200 answers per second, by the second nginx logged them.\n\
             - p50 and p99 are nginx's request times over the requests it gave the upstream \
             (everything but its 502s, which is what it answers when the limiter refuses the \
             connect); a 504 counts at the {timeout} s it waited. The bound is the upstream's own \
             p99 service time in the incident (its median times e^(2.326 sigma)) times 1.3 for \
             an exact one, 1.5 for one that varies.\n\
             - The twin: the run with no limiter on the same shape. Comparisons with it are over \
             the same part of the incident.\n\
             - Held to upstream: TCP connections from nginx's namespace to the upstream, \
             connecting, established or closed by the upstream and not yet by nginx, whether a \
             limiter runs or not. Upstream workers busy: workers holding a connection, or \
             requests on the shared cores.\n\
             - Incident from {settle:.0} s in ({spare:.0} s with workers to spare): the incident's \
             targets are judged there, as the simulator judges its shapes. At the step every \
             request in flight waits out the slow service time whatever a limit does, and with \
             nginx's {timeout} s timeout the first of them end as 504s; the whole phase's \
             figures are shown beside them.\n\
             - Recovery: from the upstream's restore to the end of the first second from which \
             goodput over {hold} s averages {recovered:.0} % of the healthy phase's, in whole seconds (an \
             average: clients an exact service time keeps in step answer in bursts). Refused \
             from {recovery:.0} s after the restore: the limiter's refusals from then to the end, \
             the simulator's recovery criterion.\n\
             - Shed and would_shed: the limiter's own counters, over the phase.\n\
             - With no limiter, a saturated upstream's queue grows past nginx's {timeout} s: \
             nginx gives up (504) while the requests it abandoned still wait in the upstream's \
             listen queue, or share its cores, and are served later, for nobody. Goodput then \
             falls far below the upstream's capacity; a limit near what it can hold would serve it.",
            timeout = rig::READ_TIMEOUT.as_secs(),
            recovered = figures::RECOVERED * 100.0,
            settle = SETTLE_S,
            spare = SETTLE_SPARE_S,
            hold = figures::RECOVERED_FOR_S,
            recovery = RECOVERY_S,
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
         It builds the agent in release, takes about half an hour with the default phases \
         (`--healthy`, `--incident`, `--recovery` and `--pgbench-phase` set them, in seconds), \
         and replaces this file and its pictures (`--out` writes them elsewhere). `--shapes`, \
         `--nginx`, `--open-loop` and `--pgbench` choose the runs (`cargo xtask lab --help`). \
         nginx, wrk, \
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
