//! `limiter-user status`: the pinned maps as a table or JSON, with or without the agent.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;

use crate::{
    config::Mode,
    tables::{Globals, Tables},
};

/// One destination; the field names are the documented JSON interface.
#[derive(Debug, Serialize, PartialEq)]
pub struct Row {
    pub address: String,
    pub port: u16,
    pub mode: &'static str,
    pub limit: u32,
    pub inflight: i64,
    pub admitted: u64,
    pub shed: u64,
    pub would_shed: u64,
    pub redirected: u64,
    /// Shadow's counterpart of `redirected`: let through at the limit while a peer had room.
    /// Not in the JSON or the table, whose columns the spec fixes: metrics show it.
    #[serde(skip)]
    pub would_redirect: u64,
    pub connect_failed: u64,
    pub baseline_ms: Option<f64>,
    pub p90_ms: Option<f64>,
}

pub fn rows(tables: &Tables) -> Result<Vec<Row>> {
    let config = tables.config()?;
    let default_mode = Mode::from_abi(config.default_mode).unwrap_or(Mode::Off);
    let ms = |ns: u64| (ns > 0).then(|| ns as f64 / 1e6);
    Ok(tables
        .destinations()?
        .into_iter()
        .map(|(key, state, policy)| {
            let addr = key.socket_addr();
            let mode = policy
                .and_then(|p| Mode::from_abi(p.mode))
                .unwrap_or(default_mode);
            Row {
                address: addr.ip().to_string(),
                port: addr.port(),
                mode: mode.name(),
                limit: policy.map_or(config.initial_limit, |p| p.limit),
                inflight: state.inflight,
                admitted: state.admitted,
                shed: state.shed,
                would_shed: state.would_shed,
                redirected: state.redirected,
                would_redirect: state.would_redirect,
                connect_failed: state.connect_failed,
                baseline_ms: policy.and_then(|p| ms(p.baseline_ns)),
                p90_ms: policy.and_then(|p| ms(p.p90_ns)),
            }
        })
        .collect())
}

pub fn print_json(out: &mut impl Write, rows: &[Row]) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, rows)?;
    writeln!(out)?;
    Ok(())
}

pub fn print_table(out: &mut impl Write, rows: &[Row], globals: &Globals) -> Result<()> {
    const HEADERS: [&str; 12] = [
        "ADDRESS",
        "PORT",
        "MODE",
        "LIMIT",
        "INFLIGHT",
        "ADMITTED",
        "SHED",
        "WOULD_SHED",
        "REDIRECTED",
        "CONNECT_FAILED",
        "BASELINE_MS",
        "P90_MS",
    ];
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let cells: Vec<[String; 12]> = rows
        .iter()
        .map(|r| {
            [
                r.address.clone(),
                r.port.to_string(),
                r.mode.to_string(),
                r.limit.to_string(),
                r.inflight.to_string(),
                r.admitted.to_string(),
                r.shed.to_string(),
                r.would_shed.to_string(),
                r.redirected.to_string(),
                r.connect_failed.to_string(),
                ms(r.baseline_ms),
                ms(r.p90_ms),
            ]
        })
        .collect();
    let mut widths = HEADERS.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let line = |out: &mut dyn Write, cols: &[&str]| -> std::io::Result<()> {
        let text: Vec<String> = cols
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i == 0 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        writeln!(out, "{}", text.join("  ").trim_end())
    };
    line(out, &HEADERS)?;
    for row in &cells {
        line(out, &row.each_ref().map(String::as_str))?;
    }
    writeln!(
        out,
        "\n{} destination(s); ring buffer drops {}, evictions {}, fail-open admits {}, untracked (no socket storage) {}",
        globals.destinations, globals.ringbuf_drops, globals.evictions, globals.fail_open, globals.storage_errors
    )?;
    Ok(())
}
