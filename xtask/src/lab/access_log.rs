//! nginx's access log as the lab writes it: one line per request with when it ended, its
//! status and how long nginx took; per-second figures come from it.

use std::{path::Path, time::SystemTime};

use anyhow::{Context, Result};

/// The `http` block's lines for it, relative to nginx's own directory.
pub const NGINX_LINES: &str = "log_format lab '$msec $status $request_time';\n  \
                               access_log access.log lab;";
pub const FILE: &str = "access.log";

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request {
    /// When it ended, in seconds since the run started.
    pub at_s: f64,
    pub status: u16,
    pub seconds: f64,
}

/// Every request logged in `dir`'s access log, timed from `start`.
pub fn read(dir: &Path, start: SystemTime) -> Result<Vec<Request>> {
    let path = dir.join(FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let start_s = start.duration_since(SystemTime::UNIX_EPOCH)?.as_secs_f64();
    Ok(text.lines().filter_map(|l| parse(l, start_s)).collect())
}

fn parse(line: &str, start_s: f64) -> Option<Request> {
    let mut fields = line.split_whitespace();
    let ended: f64 = fields.next()?.parse().ok()?;
    Some(Request {
        at_s: ended - start_s,
        status: fields.next()?.parse().ok()?,
        seconds: fields.next()?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_give_end_time_status_and_duration() {
        assert_eq!(
            parse("1764580000.250 504 2.001", 1764580000.0),
            Some(Request {
                at_s: 0.25,
                status: 504,
                seconds: 2.001
            })
        );
        assert_eq!(parse("garbage", 0.0), None);
    }
}
