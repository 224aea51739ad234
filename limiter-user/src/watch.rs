//! `limiter-user status --watch`: the status table redrawn in place, the destinations
//! shedding most since the last refresh first, then the busiest.

use std::{collections::HashMap, io::Write, time::Duration};

use anyhow::Result;

use crate::{
    maps::Maps,
    pins::PinDir,
    status::{self, Row},
};

type Key = (String, u16);

pub fn watch(pins: &PinDir, every: Duration) -> Result<()> {
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut previous: HashMap<Key, u64> = HashMap::new();
    loop {
        let maps = Maps::from_pins(pins)?;
        let mut report = status::report(pins, &maps)?;
        report.destinations = busiest_first(report.destinations, &previous);
        previous = report
            .destinations
            .iter()
            .map(|r| (key(r), refused(r)))
            .collect();
        let mut out = std::io::stdout().lock();
        // Home and clear: the table replaces the previous one instead of scrolling.
        let clear = if terminal { "\x1b[H\x1b[2J" } else { "\n" };
        write!(out, "{clear}")?;
        writeln!(
            out,
            "{} every {}s, busiest first (Ctrl-C to stop)\n",
            pins.path().display(),
            every.as_secs()
        )?;
        status::print_table(&mut out, &report)?;
        out.flush()?;
        drop(out);
        std::thread::sleep(every);
    }
}

fn key(row: &Row) -> Key {
    (row.address.clone(), row.port)
}

fn refused(row: &Row) -> u64 {
    row.shed + row.would_shed
}

/// Sorted by connects refused (or that would have been) since the last refresh, then by
/// in-flight connections, then by address.
fn busiest_first(mut rows: Vec<Row>, previous: &HashMap<Key, u64>) -> Vec<Row> {
    let recent = |r: &Row| refused(r).saturating_sub(previous.get(&key(r)).copied().unwrap_or(0));
    rows.sort_by(|a, b| {
        recent(b)
            .cmp(&recent(a))
            .then(b.inflight.cmp(&a.inflight))
            .then_with(|| key(a).cmp(&key(b)))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(port: u16, shed: u64, inflight: i64) -> Row {
        Row {
            address: "127.0.0.1".into(),
            port,
            mode: "prod",
            limit: 20,
            inflight,
            admitted: 0,
            shed,
            would_shed: 0,
            redirected: 0,
            ..Row::default()
        }
    }

    #[test]
    fn recent_refusals_come_first_then_in_flight() {
        // Port 1 shed a lot long ago and nothing since; port 2 is shedding now.
        let previous = HashMap::from([(("127.0.0.1".to_string(), 1), 500)]);
        let rows = vec![row(1, 500, 9), row(2, 3, 1), row(3, 0, 7), row(4, 0, 2)];
        let ports: Vec<u16> = busiest_first(rows, &previous)
            .iter()
            .map(|r| r.port)
            .collect();
        assert_eq!(ports, [2, 1, 3, 4]);
    }
}
