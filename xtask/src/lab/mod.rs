//! `cargo xtask lab`: the limiter against unmodified programs on real traffic. nginx
//! proxies to upstreams of several shapes (few or many workers, exact or variable service
//! times, shared cores, workers to spare) whose service time rises for a while, and pgbench
//! opens a connection per transaction to PostgreSQL, each with no limiter and with it;
//! docs/lab.md gets what happened. Every process, cgroup, namespace,
//! directory and pin it makes is gone when it ends, however it ends.

mod access_log;
mod connections;
mod figures;
mod limiter;
mod open_loop;
mod pgbench;
mod phases;
mod plot;
mod report;
mod rig;
mod sampler;
mod series;
mod shape;
mod tools;
mod upstream;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use limiter_integration_tests::Cluster;

use crate::bench::{self, binaries::Binaries, machine::Machine};
use limiter::Limiter;
use phases::Phases;
use shape::RigShape;

#[derive(Args)]
pub struct Options {
    /// One short iteration of every run, to show the code path works: no build, figures
    /// that mean nothing, and the report written to --out (by default a temporary directory).
    #[arg(long)]
    smoke: bool,
    /// The report; its pictures go to img/ beside it (default: docs/lab.md).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Seconds of healthy traffic before the incident.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    healthy: u64,
    /// Seconds the upstream is slow.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    incident: u64,
    /// Seconds of healthy traffic after it.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    recovery: u64,
    /// Seconds of each of pgbench's three phases (healthy, slow queries, healthy).
    #[arg(long, value_name = "SECS", default_value_t = 20)]
    pgbench_phase: u64,
    /// The nginx rig's upstreams, in order (none of them: `--shapes` with no value).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_values_t = shape::SHAPES, value_parser = shape::by_slug)]
    shapes: Vec<RigShape>,
    /// The nginx rig's runs on each upstream, in order (none of them: `--nginx` with no
    /// value).
    #[arg(long, value_enum, value_delimiter = ',', num_args = 0.., default_value = "none,prod")]
    nginx: Vec<Limiter>,
    /// The open-loop production incident's runs, in order (none of them: `--open-loop` with
    /// no value).
    #[arg(long, value_enum, value_delimiter = ',', num_args = 0.., default_value = "none,prod")]
    open_loop: Vec<Limiter>,
    /// pgbench's runs, in order, each beside a twin without the limiter; each kind is judged
    /// by the median of its runs' tps against their twins'. A run with no limiter shows how
    /// closely twins agree.
    #[arg(long, value_enum, value_delimiter = ',', num_args = 0.., default_value = "none,prod,prod")]
    pgbench: Vec<Limiter>,
    /// Also write every run's readings as CSV files into this directory.
    #[arg(long, value_name = "DIR")]
    series: Option<PathBuf>,
}

impl Options {
    fn phases(&self) -> (Phases, Phases) {
        let secs = Duration::from_secs;
        if self.smoke {
            let short = Phases::new(secs(2), secs(2), secs(2));
            return (short, short);
        }
        let pg = secs(self.pgbench_phase);
        (
            Phases::new(secs(self.healthy), secs(self.incident), secs(self.recovery)),
            Phases::new(pg, pg, pg),
        )
    }

    /// pgbench's runs: a smoke run plays each kind once.
    fn pgbench_runs(&self) -> Vec<Limiter> {
        if self.smoke {
            Limiter::kinds(self.pgbench.iter().copied())
        } else {
            self.pgbench.clone()
        }
    }

    fn out(&self) -> PathBuf {
        match &self.out {
            Some(path) => path.clone(),
            None if self.smoke => std::env::temp_dir().join("limiter-lab-smoke/lab.md"),
            None => crate::workspace_root().join("docs/lab.md"),
        }
    }
}

pub fn run(options: Options) -> Result<()> {
    bench::preflight(
        "the lab attaches eBPF programs and makes cgroups, a network namespace and a \
         PostgreSQL cluster",
        "lab",
    )?;
    let postgres = tools::check()?;
    let (rig_phases, pg_phases) = options.phases();
    let bins = if options.smoke {
        println!("smoke run: one short iteration of every run; its figures mean nothing");
        Binaries::debug()?
    } else {
        Binaries::release()?
    };
    let mut machine = Machine::describe()?;
    let command = if options.smoke {
        "cargo xtask lab --smoke".to_string()
    } else {
        let runs = |runs: &[Limiter]| {
            runs.iter()
                .map(|r| {
                    r.to_possible_value()
                        .expect("no skipped variants")
                        .get_name()
                        .to_string()
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        format!(
            "cargo xtask lab --healthy {} --incident {} --recovery {} --pgbench-phase {} \
             --shapes {} --nginx {} --open-loop {} --pgbench {}",
            options.healthy,
            options.incident,
            options.recovery,
            options.pgbench_phase,
            options
                .shapes
                .iter()
                .map(|s| s.slug)
                .collect::<Vec<_>>()
                .join(","),
            runs(&options.nginx),
            runs(&options.open_loop),
            runs(&options.pgbench)
        )
    };

    let mut rig_runs = Vec::new();
    for &shape in &options.shapes {
        let upstream = upstream::Upstream::start(shape.servers, shape.sigma, shape.healthy)?;
        for &limiter in &options.nginx {
            eprintln!("lab: nginx, {}, {}", shape.slug, limiter.label());
            rig_runs.push(rig::run(&bins, rig_phases, limiter, shape, &upstream)?);
        }
    }
    let mut open_runs = Vec::new();
    for &limiter in &options.open_loop {
        eprintln!("lab: open loop, {}", limiter.label());
        open_runs.push(open_loop::run(&bins, rig_phases, limiter)?);
    }
    let cluster = Cluster::start(&postgres.bin, None)?;
    let mut pg_runs = Vec::new();
    for limiter in options.pgbench_runs() {
        eprintln!("lab: pgbench, {}", limiter.label());
        pg_runs.push(pgbench::run(&bins, pg_phases, &cluster, limiter)?);
    }
    drop(cluster);
    machine.idle_after = Some(bench::machine::idle_percent()?);

    let out = options.out();
    let images = out.parent().unwrap_or(Path::new(".")).join("img");
    std::fs::create_dir_all(&images)
        .with_context(|| format!("cannot create {}", images.display()))?;
    if let Some(dir) = &options.series {
        series::write(dir, &rig_runs, &open_runs, &pg_runs)?;
    }
    let mut pictures = report::Pictures {
        rig: Vec::new(),
        open_loop: "img/lab-open-loop.svg".into(),
        pgbench: "img/lab-pgbench.svg".into(),
    };
    for shape in &options.shapes {
        let runs: Vec<&rig::RigRun> = rig_runs.iter().filter(|r| r.shape == *shape).collect();
        if runs.is_empty() {
            continue;
        }
        let name = format!("lab-nginx-{}.svg", shape.slug);
        plot::rig(&images.join(&name), &runs)?;
        pictures.rig.push((*shape, format!("img/{name}")));
    }
    plot::open_loop(&images.join("lab-open-loop.svg"), &open_runs)?;
    plot::pgbench(&images.join("lab-pgbench.svg"), &pg_runs)?;
    let markdown = report::Report {
        machine,
        command,
        pgbench_version: bench::machine::command_line(
            &postgres.program("pgbench").to_string_lossy(),
            &["--version"],
        )?,
        rig_phases,
        pg_phases,
        rig: &rig_runs,
        open_loop: &open_runs,
        pgbench: &pg_runs,
        pictures,
    }
    .render();
    std::fs::write(&out, &markdown).with_context(|| format!("cannot write {}", out.display()))?;
    println!("{markdown}");
    eprintln!("lab: report written to {}", out.display());
    Ok(())
}
