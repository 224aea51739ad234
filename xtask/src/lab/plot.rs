//! Pictures of the runs: one column per run, the limit against in-flight and connections
//! held above, what got served below, over the run's time with its phases marked.

use std::path::Path;

use anyhow::Result;
use plotters::{coord::Shift, prelude::*};

use super::{
    access_log::Request,
    figures::{self, BAD_GATEWAY, GATEWAY_TIMEOUT},
    limiter::Limiter,
    open_loop::{self, OpenLoopRun},
    pgbench::{PgRun, Summary},
    phases::{Phase, Phases},
    rig::RigRun,
    sampler::Tick,
};

const COLUMN_WIDTH: u32 = 620;
const HEIGHT: u32 = 620;

struct Series {
    name: &'static str,
    colour: RGBColor,
    width: u32,
    points: Vec<(f64, f64)>,
}

struct Panel {
    caption: &'static str,
    y_desc: &'static str,
    series: Vec<Series>,
}

struct Column {
    label: &'static str,
    phases: Phases,
    panels: [Panel; 2],
}

const LIMIT: RGBColor = RGBColor(220, 60, 60);
const INFLIGHT: RGBColor = RGBColor(30, 90, 200);
const HELD: RGBColor = RGBColor(120, 120, 120);
const BUSY: RGBColor = RGBColor(20, 140, 60);
const SERVED: RGBColor = RGBColor(40, 40, 40);
const REFUSED: RGBColor = RGBColor(230, 140, 20);
const TIMED_OUT: RGBColor = RGBColor(150, 50, 170);

/// The runs on one shape of upstream.
pub fn rig(path: &Path, runs: &[&RigRun]) -> Result<()> {
    let columns = runs
        .iter()
        .map(|run| {
            requests_column(
                run.limiter,
                run.phases,
                &run.ticks,
                &run.requests,
                Captions {
                    busy: "upstream workers busy",
                    got: "what wrk got",
                    unit: "responses / s",
                    ended: ["goodput (200 / s)", "502 / s", "504 / s"],
                },
            )
        })
        .collect::<Vec<_>>();
    let title = runs.first().map_or(String::new(), |r| {
        format!("nginx to an upstream of {}", r.shape.describe())
    });
    draw(path, &title, &columns)
}

pub fn open_loop(path: &Path, runs: &[OpenLoopRun]) -> Result<()> {
    let columns = runs
        .iter()
        .map(|run| {
            requests_column(
                run.limiter,
                run.phases,
                &run.ticks,
                &run.requests(),
                Captions {
                    busy: "requests being served",
                    got: "what the service's requests got",
                    unit: "requests / s",
                    ended: ["answered / s", "refused / s", "given up on / s"],
                },
            )
        })
        .collect::<Vec<_>>();
    draw(
        path,
        &format!(
            "open loop, {} requests / s; the median answer {} -> {} -> {} ms",
            open_loop::RATE,
            open_loop::HEALTHY.as_millis(),
            open_loop::DEGRADED.as_millis(),
            open_loop::HEALTHY.as_millis(),
        ),
        &columns,
    )
}

/// What a column of requests says: the upstream's busy servers, what the requests got and
/// in what unit, and the names of the three ways a request ends (answered, refused at
/// connect, timed out).
struct Captions {
    busy: &'static str,
    got: &'static str,
    unit: &'static str,
    ended: [&'static str; 3],
}

/// The limit, in-flight and the upstream's busy servers above; the requests answered,
/// refused and timed out each second below.
fn requests_column(
    limiter: Limiter,
    phases: Phases,
    run: &[Tick],
    requests: &[Request],
    captions: Captions,
) -> Column {
    let total = phases.total().as_secs_f64();
    let [answered, refused, timed_out] = captions.ended;
    let per_second = |name, colour, status| Series {
        name,
        colour,
        width: 2,
        points: seconds(requests, status, total),
    };
    let mut concurrency = limiter_series(run);
    concurrency.push(Series {
        name: captions.busy,
        colour: BUSY,
        width: 1,
        points: ticks(run, |t| t.busy.map(|b| b as f64)),
    });
    Column {
        label: limiter.label(),
        phases,
        panels: [
            Panel {
                caption: "concurrency to the upstream",
                y_desc: "connections",
                series: concurrency,
            },
            Panel {
                caption: captions.got,
                y_desc: captions.unit,
                series: vec![
                    per_second(answered, SERVED, 200),
                    per_second(refused, REFUSED, BAD_GATEWAY),
                    per_second(timed_out, TIMED_OUT, GATEWAY_TIMEOUT),
                ],
            },
        ],
    }
}

/// One column per kind of run: the first of each (the runs repeat for their tps only).
pub fn pgbench(path: &Path, runs: &[PgRun]) -> Result<()> {
    let columns = Limiter::kinds(runs.iter().map(|r| r.limiter))
        .into_iter()
        .filter_map(|kind| runs.iter().find(|r| r.limiter == kind))
        .map(|run| Column {
            label: run.limiter.label(),
            phases: run.phases,
            panels: [
                Panel {
                    caption: "concurrency to PostgreSQL",
                    y_desc: "connections",
                    series: limiter_series(&run.ticks),
                },
                Panel {
                    caption: "what pgbench got",
                    y_desc: "transactions / s",
                    series: vec![
                        Series {
                            name: "tps",
                            colour: SERVED,
                            width: 2,
                            points: progress(&run.limited),
                        },
                        Series {
                            name: "tps, its twin without a limiter",
                            colour: HELD,
                            width: 1,
                            points: progress(&run.twin),
                        },
                    ],
                },
            ],
        })
        .collect::<Vec<_>>();
    draw(
        path,
        "pgbench -C, 10 clients; each transaction sleeps 0 -> 100 -> 0 ms",
        &columns,
    )
}

/// pgbench's progress reports, each at the middle of the second it covers.
fn progress(summary: &Summary) -> Vec<(f64, f64)> {
    summary
        .progress
        .iter()
        .map(|&(at, tps)| (at - 0.5, tps))
        .collect()
}

/// The limit and the limiter's in-flight (where it runs), and the connections held.
fn limiter_series(run: &[Tick]) -> Vec<Series> {
    vec![
        Series {
            name: "limit",
            colour: LIMIT,
            width: 3,
            points: ticks(run, |t| t.limiter.as_ref().map(|g| f64::from(g.limit))),
        },
        Series {
            name: "in-flight (limiter)",
            colour: INFLIGHT,
            width: 1,
            points: ticks(run, |t| t.limiter.as_ref().map(|g| g.inflight as f64)),
        },
        Series {
            name: "connections held",
            colour: HELD,
            width: 1,
            points: ticks(run, |t| Some(t.held as f64)),
        },
    ]
}

fn ticks(run: &[Tick], pick: impl Fn(&Tick) -> Option<f64>) -> Vec<(f64, f64)> {
    run.iter()
        .filter_map(|t| pick(t).map(|v| (t.at_s, v)))
        .collect()
}

/// Answers of `status` per second, each plotted at the middle of its second.
fn seconds(requests: &[Request], status: u16, total_s: f64) -> Vec<(f64, f64)> {
    figures::per_second(requests, status, total_s)
        .into_iter()
        .enumerate()
        .map(|(i, n)| (i as f64 + 0.5, f64::from(n)))
        .collect()
}

/// Nothing when there is no run to draw.
fn draw(path: &Path, title: &str, columns: &[Column]) -> Result<()> {
    if columns.is_empty() {
        return Ok(());
    }
    let width = COLUMN_WIDTH * u32::try_from(columns.len())?.max(1);
    let root = SVGBackend::new(path, (width, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    for (area, column) in root.split_evenly((1, columns.len())).iter().zip(columns) {
        let (top, bottom) = area.split_vertically(HEIGHT / 2 - 20);
        let [upper, lower] = &column.panels;
        panel(
            &top,
            &format!("{}: {}", column.label, upper.caption),
            upper,
            column.phases,
        )?;
        panel(&bottom, lower.caption, lower, column.phases)?;
    }
    root.present()?;
    Ok(())
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    panel: &Panel,
    phases: Phases,
) -> Result<()> {
    let end_s = phases.total().as_secs_f64().max(1.0);
    let top = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(32)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..end_s, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("seconds (the upstream's incident shaded)")
        .y_desc(panel.y_desc)
        .max_light_lines(0)
        .y_labels(6)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    // The incident: from the upstream's slowdown to its restore.
    let (from, to) = phases.window(Phase::Incident);
    chart.draw_series([Rectangle::new(
        [(from, 0.0), (to, top)],
        RGBColor(250, 235, 235).filled(),
    )])?;
    for s in &panel.series {
        let style = s.colour.stroke_width(s.width);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), style))?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.7))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}
