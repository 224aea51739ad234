//! `limiter-user events`: a running agent's event stream, one line per event.

use std::{
    io::{BufRead, BufReader, Write},
    os::unix::net::UnixStream,
};

use anyhow::{Context, Result};

use crate::{
    feed::{self, Decision, Event, LimitChange},
    pins::PinDir,
};

/// Prints the stream of the agent whose pins are `pins` until that agent stops.
pub fn follow(pins: &PinDir, json: bool) -> Result<()> {
    let path = feed::socket_path(pins);
    let stream = UnixStream::connect(&path).with_context(|| {
        format!(
            "no agent is serving events for {} (cannot connect to {}): is `limiter-user run` or `exec` running for this cgroup?",
            pins.path().display(),
            path.display()
        )
    })?;
    let mut lines = BufReader::new(stream).lines();
    match lines.next() {
        Some(Ok(line)) if line == feed::GREETING => {}
        _ => anyhow::bail!(
            "{} did not greet this reader as a limiter agent does: is it this version's agent?",
            path.display()
        ),
    }
    eprintln!("limiter-user: following {}", path.display());
    let mut out = std::io::stdout().lock();
    for line in lines {
        let line = line.context("the event stream broke off")?;
        let text = match serde_json::from_str::<Event>(&line) {
            Ok(event) if !json => render(&event),
            _ => line,
        };
        // A closed pipe (`| head`) ends the reader, quietly.
        if writeln!(out, "{text}").is_err() {
            return Ok(());
        }
    }
    eprintln!("limiter-user: the agent stopped");
    Ok(())
}

/// One human line: when, what, where, and who or why.
fn render(event: &Event) -> String {
    let decision = |kind: &str, d: &Decision| {
        let to = d
            .peer
            .as_ref()
            .map(|p| format!(" -> {p}"))
            .unwrap_or_default();
        format!(
            "{} {kind} {}{to} limit {} in-flight {} by {}[{}]",
            clock(d.at_ms),
            d.destination,
            d.limit,
            d.inflight,
            d.comm,
            d.pid
        )
    };
    match event {
        Event::Shed(d) => decision("shed", d),
        Event::WouldShed(d) => decision("would_shed", d),
        Event::Redirected(d) => decision("redirected", d),
        Event::WouldRedirect(d) => decision("would_redirect", d),
        Event::Queued(d) => decision("queued", d),
        Event::QueueFull(d) => decision("queue_full", d),
        Event::Waited(w) => format!(
            "{} {} {} after waiting {:.1} ms",
            clock(w.at_ms),
            w.end,
            w.destination,
            w.waited_ms
        ),
        Event::Limit(change) => limit_line(change),
        Event::Lost { count } => format!(
            "{} lost {count} event(s): this reader fell behind",
            clock(feed::now_ms())
        ),
    }
}

fn limit_line(c: &LimitChange) -> String {
    let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1} ms"));
    let mut why = format!(
        "p90 {} vs baseline {}, {} error(s), {} timeout(s)",
        ms(c.p90_ms),
        ms(c.baseline_ms),
        c.errors,
        c.timeouts
    );
    if c.overloads > 0 {
        why.push_str(&format!(", {} overload answer(s) (429, 503)", c.overloads));
    }
    if c.reconfigured {
        why.push_str(", new configuration");
    }
    format!(
        "{} limit {} {} -> {}: {why}",
        clock(c.at_ms),
        c.destination,
        c.old,
        c.new
    )
}

/// HH:MM:SS.mmm, UTC.
fn clock(at_ms: u64) -> String {
    let (secs, ms) = (at_ms / 1000, at_ms % 1000);
    let day = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{ms:03}Z",
        day / 3600,
        day % 3600 / 60,
        day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_destination_limit_and_process() {
        let line = render(&Event::Shed(Decision {
            at_ms: 3_723_004,
            destination: "10.0.0.2:8000".into(),
            peer: None,
            limit: 20,
            inflight: 20,
            pid: 1234,
            comm: "nginx".into(),
        }));
        assert_eq!(
            line,
            "01:02:03.004Z shed 10.0.0.2:8000 limit 20 in-flight 20 by nginx[1234]"
        );
    }

    #[test]
    fn a_limit_change_says_why() {
        let line = render(&Event::Limit(LimitChange {
            at_ms: 0,
            destination: "10.0.0.2:8000".into(),
            old: 20,
            new: 14,
            p90_ms: Some(58.14),
            baseline_ms: Some(41.2),
            errors: 1,
            timeouts: 0,
            overloads: 3,
            reconfigured: false,
        }));
        assert_eq!(
            line,
            "00:00:00.000Z limit 10.0.0.2:8000 20 -> 14: p90 58.1 ms vs baseline 41.2 ms, 1 error(s), 0 timeout(s), 3 overload answer(s) (429, 503)"
        );
    }
}
