//! `limiter-user status`: the pinned maps as a table or JSON, with or without the agent,
//! and whether anything still enforces them.

use std::io::Write;

use anyhow::Result;
use limiter_common::{maps, Overflow};
use serde::Serialize;

use crate::{
    clock::monotonic_ns,
    config::Mode,
    lock::AgentLock,
    maps::{Globals, Maps},
    pins::PinDir,
};

/// Everything `status` shows; the field names are the documented JSON interface.
#[derive(Debug, Serialize)]
pub struct Report {
    pub agent: AgentState,
    pub globals: Globals,
    pub destinations: Vec<Row>,
}

/// Who enforces the pinned limits.
#[derive(Debug, Serialize, PartialEq)]
pub struct AgentState {
    /// An agent holds the lock of this pin directory.
    pub running: bool,
    pub pid: Option<u32>,
    /// The connect hooks using these maps are attached (by an agent, or kept for the next).
    pub attached: bool,
    /// Since the agent's last heartbeat.
    pub heartbeat_age_ms: f64,
    /// Beyond this heartbeat age the kernel admits everything.
    pub heartbeat_timeout_ms: f64,
    pub failing_open: bool,
}

impl AgentState {
    /// Nothing enforces what the maps say: a dead agent left them.
    pub fn abandoned(&self) -> bool {
        !self.running && !self.attached
    }
}

/// The report of the pin directory `dir`, read through `maps`.
pub fn report(dir: &PinDir, maps: &Maps) -> Result<Report> {
    Ok(Report {
        agent: agent_state(dir, maps)?,
        globals: maps.globals()?,
        destinations: rows(maps)?,
    })
}

pub fn agent_state(dir: &PinDir, maps: &Maps) -> Result<AgentState> {
    let config = maps.config()?;
    let pid = AgentLock::holder(&dir.lock_name());
    let age_ns = monotonic_ns().saturating_sub(config.heartbeat_ns);
    Ok(AgentState {
        running: pid.is_some(),
        pid,
        attached: connect_hooks_attached(dir)?,
        heartbeat_age_ms: age_ns as f64 / 1e6,
        heartbeat_timeout_ms: config.heartbeat_timeout_ns as f64 / 1e6,
        failing_open: age_ns > config.heartbeat_timeout_ns,
    })
}

/// Whether a connect hook using this directory's destination table is loaded. The agent
/// loads programs only to attach them, and they unload once nothing holds their link.
fn connect_hooks_attached(dir: &PinDir) -> Result<bool> {
    let dests = aya::maps::MapInfo::from_pin(dir.map(maps::DESTS))?.id();
    for program in aya::programs::loaded_programs() {
        // Another process may unload a program between listing and opening it.
        let program = match program {
            Err(e) if vanished(&e) => continue,
            other => other?,
        };
        // Kernel object names are cut to 15 characters: "limiter_connect4" -> "limiter_connect".
        if !program
            .name_as_str()
            .is_some_and(|n| "limiter_connect4".starts_with(n) && n.len() >= 15)
        {
            continue;
        }
        let map_ids = match program.map_ids() {
            Err(e) if vanished(&e) => continue,
            other => other?,
        };
        if map_ids.unwrap_or_default().contains(&dests) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn vanished(e: &aya::programs::ProgramError) -> bool {
    matches!(e, aya::programs::ProgramError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::ENOENT))
}

/// One destination; the field names are the documented JSON interface.
#[derive(Debug, Default, Serialize, PartialEq)]
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
    /// Exchanges the kernel saw but could not time (TLS 1.3's first two per connection;
    /// once per HTTP/2-over-TLS connection, whose exchanges cannot be told apart).
    pub untimed: u64,
    /// Cleartext HTTP/1.x answers that were not a success, by status: 4xx (429 aside),
    /// 429, 5xx (503 aside), 503.
    pub http_4xx: u64,
    pub http_429: u64,
    pub http_5xx: u64,
    pub http_503: u64,
    pub baseline_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    /// What a connect at the limit gets: refuse or queue.
    pub overflow: &'static str,
    /// Queued connects: waiting now; since the destination was first seen, queued,
    /// admitted from the queue, refused as it was full, failed at the maximum wait, closed
    /// by the application while waiting.
    pub waiting: i64,
    pub queued: u64,
    pub queue_admitted: u64,
    pub queue_full: u64,
    pub queue_expired: u64,
    pub queue_abandoned: u64,
    /// The recent waits of connects admitted from the queue.
    pub wait_p50_ms: Option<f64>,
    pub wait_p99_ms: Option<f64>,
}

pub fn rows(maps: &Maps) -> Result<Vec<Row>> {
    let config = maps.config()?;
    let default_mode = Mode::from_abi(config.default_mode).unwrap_or(Mode::Off);
    let ms = |ns: u64| (ns > 0).then(|| ns as f64 / 1e6);
    Ok(maps
        .destinations()?
        .into_iter()
        .map(|(key, state, policy)| {
            let addr = key.socket_addr();
            let mode = policy
                .and_then(|p| Mode::from_abi(p.mode))
                .unwrap_or(default_mode);
            let queue = policy
                .map(|p| p.queue)
                .filter(|q| q.overflow != u32::from(Overflow::Default))
                .unwrap_or(config.queue);
            let overflow = if queue.overflow == u32::from(Overflow::Queue) {
                "queue"
            } else {
                "refuse"
            };
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
                untimed: state.untimed,
                http_4xx: state.answers_4xx,
                http_429: state.answers_429,
                http_5xx: state.answers_5xx,
                http_503: state.answers_503,
                baseline_ms: policy.and_then(|p| ms(p.baseline_ns)),
                p90_ms: policy.and_then(|p| ms(p.p90_ns)),
                overflow,
                waiting: state.waiting,
                queued: state.queued,
                queue_admitted: state.queue_admitted,
                queue_full: state.queue_full,
                queue_expired: state.queue_expired,
                queue_abandoned: state.queue_abandoned,
                wait_p50_ms: policy.and_then(|p| ms(p.wait_p50_ns)),
                wait_p99_ms: policy.and_then(|p| ms(p.wait_p99_ns)),
            }
        })
        .collect())
}

pub fn print_json(out: &mut impl Write, report: &Report) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    writeln!(out)?;
    Ok(())
}

/// One line on who enforces the limits below it.
pub fn agent_line(agent: &AgentState) -> String {
    let beat = format!(
        "heartbeat {:.1} s ago (fails open after {:.0} s)",
        agent.heartbeat_age_ms / 1e3,
        agent.heartbeat_timeout_ms / 1e3
    );
    let open = if agent.failing_open {
        ": FAILING OPEN, everything is admitted"
    } else {
        ""
    };
    match (agent.pid, agent.attached) {
        (Some(pid), true) => format!("agent running (pid {pid}), programs attached, {beat}{open}"),
        (Some(pid), false) => format!("agent running (pid {pid}), programs NOT attached"),
        (None, true) => format!("no agent running; programs attached, kept for the next agent, {beat}{open}"),
        (None, false) => "no agent running and no programs attached: nothing enforces these limits (a dead agent left them; `limiter-user detach` removes them)".into(),
    }
}

pub fn print_table(out: &mut impl Write, report: &Report) -> Result<()> {
    let (rows, globals) = (&report.destinations, &report.globals);
    writeln!(out, "{}\n", agent_line(&report.agent))?;
    const HEADERS: [&str; 14] = [
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
        "UNTIMED",
        "HTTP_4XX/429/5XX/503",
        "BASELINE_MS",
        "P90_MS",
    ];
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let cells: Vec<[String; 14]> = rows
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
                r.untimed.to_string(),
                format!(
                    "{}/{}/{}/{}",
                    r.http_4xx, r.http_429, r.http_5xx, r.http_503
                ),
                ms(r.baseline_ms),
                ms(r.p90_ms),
            ]
        })
        .collect();
    print_columns(out, HEADERS, &cells)?;
    let queues: Vec<[String; 10]> = rows
        .iter()
        .filter(|r| r.overflow == "queue" || r.queued > 0)
        .map(|r| {
            [
                r.address.clone(),
                r.port.to_string(),
                r.waiting.to_string(),
                r.queued.to_string(),
                r.queue_admitted.to_string(),
                r.queue_full.to_string(),
                r.queue_expired.to_string(),
                r.queue_abandoned.to_string(),
                ms(r.wait_p50_ms),
                ms(r.wait_p99_ms),
            ]
        })
        .collect();
    if !queues.is_empty() {
        writeln!(out, "\nQueues (overflow = \"queue\"):")?;
        print_columns(
            out,
            [
                "ADDRESS",
                "PORT",
                "WAITING",
                "QUEUED",
                "ADMITTED",
                "FULL",
                "EXPIRED",
                "ABANDONED",
                "WAIT_P50_MS",
                "WAIT_P99_MS",
            ],
            &queues,
        )?;
    }
    writeln!(
        out,
        "\n{} destination(s); ring buffer drops {}, table full {}, fail-open admits {}, untracked (no socket storage) {}",
        globals.destinations, globals.ringbuf_drops, globals.table_full, globals.fail_open, globals.untracked
    )?;
    Ok(())
}

/// A table: the first column left-aligned, the others right-aligned, each as wide as its
/// widest cell.
fn print_columns<const N: usize>(
    out: &mut impl Write,
    headers: [&str; N],
    cells: &[[String; N]],
) -> Result<()> {
    let mut widths = headers.map(str::len);
    for row in cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut line = |cols: &[&str]| -> std::io::Result<()> {
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
    line(&headers)?;
    for row in cells {
        line(&row.each_ref().map(String::as_str))?;
    }
    Ok(())
}
