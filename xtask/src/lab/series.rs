//! Each run's readings as CSV, for a closer look than the report's: what the limiter said
//! every reading, what nginx answered every second, every request nginx logged, and every
//! window the agent closed (its figures and the limit it left, one JSON object a line).

use std::{fmt::Write as _, path::Path};

use anyhow::{Context, Result};

use super::{
    figures::{self, BAD_GATEWAY, GATEWAY_TIMEOUT},
    limiter::Limiter,
    open_loop::OpenLoopRun,
    pgbench::PgRun,
    rig::RigRun,
    sampler::Tick,
};

pub fn write(dir: &Path, rig: &[RigRun], open: &[OpenLoopRun], pgbench: &[PgRun]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let save = |name: String, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    for run in rig {
        let name = format!("nginx-{}-{}", run.shape.slug, slug(run.limiter));
        save(format!("{name}.csv"), readings(&run.ticks))?;
        let total = run.phases.total().as_secs_f64();
        let columns = [200, BAD_GATEWAY, GATEWAY_TIMEOUT]
            .map(|status| figures::per_second(&run.requests, status, total));
        let mut text = String::from("second,ok,bad_gateway,gateway_timeout\n");
        for (second, ((ok, refused), timed_out)) in columns[0]
            .iter()
            .zip(&columns[1])
            .zip(&columns[2])
            .enumerate()
        {
            let _ = writeln!(text, "{second},{ok},{refused},{timed_out}");
        }
        save(format!("{name}-answers.csv"), text)?;
        let mut text = String::from("ended_s,status,seconds\n");
        for r in &run.requests {
            let _ = writeln!(text, "{:.3},{},{:.3}", r.at_s, r.status, r.seconds);
        }
        save(format!("{name}-requests.csv"), text)?;
        save(format!("{name}-windows.jsonl"), run.windows.clone())?;
    }
    for run in open {
        let name = format!("open-loop-{}", slug(run.limiter));
        save(format!("{name}.csv"), readings(&run.ticks))?;
        let mut text = String::from("sent_s,seconds,fate\n");
        for s in &run.sent {
            let fate = serde_json::to_value(s.fate)?;
            let _ = writeln!(
                text,
                "{:.3},{:.3},{}",
                s.at_s,
                s.seconds,
                fate.as_str().unwrap_or_default()
            );
        }
        save(format!("{name}-requests.csv"), text)?;
        save(format!("{name}-windows.jsonl"), run.windows.clone())?;
    }
    for run in pgbench {
        save(
            format!("pgbench-{}.csv", slug(run.limiter)),
            readings(&run.ticks),
        )?;
        save(
            format!("pgbench-{}-windows.jsonl", slug(run.limiter)),
            run.windows.clone(),
        )?;
    }
    Ok(())
}

fn slug(limiter: Limiter) -> &'static str {
    match limiter {
        Limiter::None => "none",
        Limiter::Prod => "prod",
        Limiter::Queue => "queue",
        Limiter::Shadow => "shadow",
    }
}

fn readings(ticks: &[Tick]) -> String {
    let mut text =
        String::from("at_s,held,busy,limit,inflight,shed,would_shed,baseline_ms,p90_ms\n");
    let some = |v: Option<String>| v.unwrap_or_default();
    for t in ticks {
        let g = t.limiter.as_ref();
        let _ = writeln!(
            text,
            "{:.2},{},{},{},{},{},{},{},{}",
            t.at_s,
            t.held,
            some(t.busy.map(|b| b.to_string())),
            some(g.map(|g| g.limit.to_string())),
            some(g.map(|g| g.inflight.to_string())),
            some(g.map(|g| g.shed.to_string())),
            some(g.map(|g| g.would_shed.to_string())),
            some(g.and_then(|g| g.baseline_ms).map(|v| format!("{v:.1}"))),
            some(g.and_then(|g| g.p90_ms).map(|v| format!("{v:.1}"))),
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::sampler::Gauge;

    #[test]
    fn a_reading_without_a_limiter_leaves_its_columns_empty() {
        let ticks = [
            Tick {
                at_s: 0.2,
                held: 3,
                busy: Some(2),
                limiter: None,
            },
            Tick {
                at_s: 0.4,
                held: 5,
                busy: None,
                limiter: Some(Gauge {
                    limit: 20,
                    inflight: 5,
                    shed: 1,
                    would_shed: 0,
                    baseline_ms: Some(30.04),
                    p90_ms: None,
                }),
            },
        ];
        let text = readings(&ticks);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "0.20,3,2,,,,,,");
        assert_eq!(lines[2], "0.40,5,,20,5,1,0,30.0,");
    }
}
