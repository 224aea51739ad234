//! Pictures of a played scenario: per run, the limit against in-flight, the latency the
//! controller saw, and what was shed, over virtual time.

use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::clock::as_secs;
use crate::criteria::figure;
use crate::trace::Trace;

const COLUMN_WIDTH: u32 = 620;
const HEIGHT: u32 = 760;
/// Points per drawn series: enough for the eye, small enough for a light SVG.
const BUCKETS: usize = 200;

struct Series {
    name: &'static str,
    colour: RGBColor,
    width: u32,
    points: Vec<(f64, f64)>,
}

/// Draws one column per run into an SVG file at `path`.
pub fn draw(path: &Path, title: &str, traces: &[(&str, Trace)]) -> anyhow::Result<()> {
    let columns = u32::try_from(traces.len())?.max(1);
    let root = SVGBackend::new(path, (COLUMN_WIDTH * columns, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    for (column, (label, trace)) in root.split_evenly((1, traces.len())).iter().zip(traces) {
        let end_s = as_secs(trace.ticks.last().map_or(0, |t| t.at)).max(1.0);
        let rows = column.split_evenly((3, 1));
        let concurrency = [
            Series {
                name: "limit",
                colour: RGBColor(220, 60, 60),
                width: 4,
                points: envelope(
                    trace
                        .ticks
                        .iter()
                        .map(|t| (as_secs(t.at), f64::from(t.limit))),
                ),
            },
            Series {
                name: "in-flight",
                colour: RGBColor(30, 90, 200),
                width: 1,
                points: envelope(
                    trace
                        .ticks
                        .iter()
                        .map(|t| (as_secs(t.at), f64::from(t.inflight))),
                ),
            },
        ];
        let top = highest(&concurrency) * 1.1;
        chart(
            &rows[0],
            label,
            "connections",
            end_s,
            0.0..top,
            &concurrency,
        )?;

        let per_second = |pick: fn(&crate::trace::Second) -> Option<f64>| {
            envelope(
                trace
                    .seconds
                    .iter()
                    .enumerate()
                    .filter_map(move |(i, s)| pick(s).map(|v| (i as f64 + 0.5, v))),
            )
        };
        let latency = [
            Series {
                name: "p50 first byte",
                width: 2,
                colour: RGBColor(20, 140, 60),
                points: per_second(|s| s.p50_s),
            },
            Series {
                name: "p90 first byte",
                width: 2,
                colour: RGBColor(230, 140, 20),
                points: per_second(|s| s.p90_s),
            },
        ];
        let lowest = latency
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .fold(f64::INFINITY, f64::min);
        let range = if lowest.is_finite() {
            (lowest / 1.5..highest(&latency) * 1.5).log_scale()
        } else {
            (0.01..1.0).log_scale()
        };
        chart(&rows[1], "latency", "seconds (log)", end_s, range, &latency)?;

        let shed = [Series {
            name: "shed per second",
            width: 2,
            colour: RGBColor(40, 40, 40),
            points: per_second(|s| Some(f64::from(s.shed))),
        }];
        let top = highest(&shed).max(1.0) * 1.1;
        chart(
            &rows[2],
            "shed",
            "refused connects / s",
            end_s,
            0.0..top,
            &shed,
        )?;
    }
    root.present()?;
    Ok(())
}

fn chart<Y>(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    y_desc: &str,
    end_s: f64,
    y: Y,
    series: &[Series],
) -> anyhow::Result<()>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(32)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..end_s, y)?;
    chart
        .configure_mesh()
        .x_desc("virtual time (s)")
        .y_desc(y_desc)
        .x_label_formatter(&|v| figure(*v))
        .y_label_formatter(&|v| figure(*v))
        .max_light_lines(0)
        .y_labels(6)
        .draw()?;
    for s in series {
        let style = s.colour.stroke_width(s.width);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), style))?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

fn highest(series: &[Series]) -> f64 {
    series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
}

/// Thins a time series to at most two points per bucket of time, keeping each bucket's
/// lowest and highest value so that short spikes stay visible.
fn envelope(points: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    let points: Vec<(f64, f64)> = points.collect();
    let Some(&(end, _)) = points.last() else {
        return points;
    };
    let width = (end / BUCKETS as f64).max(f64::MIN_POSITIVE);
    let mut out = Vec::with_capacity(2 * BUCKETS + 2);
    for bucket in points.chunk_by(|a, b| (a.0 / width).floor() == (b.0 / width).floor()) {
        let low = bucket.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1));
        let high = bucket.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(low), Some(high)) = (low, high) {
            if low.0 <= high.0 {
                out.extend([low, high]);
            } else {
                out.extend([high, low]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_keeps_spikes_and_thins_the_rest() {
        let mut series: Vec<(f64, f64)> = (0..30_000).map(|i| (f64::from(i), 1.0)).collect();
        series[12_345].1 = 50.0;
        let thin = envelope(series.into_iter());
        assert!(thin.len() <= 2 * BUCKETS + 2, "{} points", thin.len());
        assert!(thin.contains(&(12_345.0, 50.0)));
        assert!(
            thin.windows(2).all(|w| w[0].0 <= w[1].0),
            "time stays ordered"
        );
    }
}
