//! Connection set-up cost: connect and close, one connection after another, each timed.

use std::{
    collections::BTreeMap,
    io,
    net::{Ipv4Addr, SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};

#[derive(Debug, Serialize, Deserialize)]
pub struct ConnectLoopReport {
    pub ok: usize,
    pub refused: usize,
    /// Every other failure, by error.
    pub failed: BTreeMap<String, usize>,
    /// Time of each connect+close, in order.
    pub ns: Vec<u64>,
}

/// The `i`-th of many loopback addresses (127.1.0.0 on), all reaching a listener bound to
/// the unspecified address: every connect of the loop then goes to a destination of its own.
pub fn spread(to: SocketAddr, i: usize) -> SocketAddr {
    let base = u32::from(Ipv4Addr::new(127, 1, 0, 0));
    SocketAddr::from((Ipv4Addr::from(base + i as u32), to.port()))
}

/// `count` connects to `to`, or with `spread_out` each to an address of its own (see
/// [`spread`]).
pub fn run(
    to: SocketAddr,
    count: usize,
    hold_first: bool,
    spread_out: bool,
) -> Result<ConnectLoopReport> {
    let _held = hold_first
        .then(|| TcpStream::connect(to).context("the connection held for the whole loop"))
        .transpose()?;
    let mut report = ConnectLoopReport {
        ok: 0,
        refused: 0,
        failed: BTreeMap::new(),
        ns: Vec::with_capacity(count),
    };
    for i in 0..count {
        let to = if spread_out { spread(to, i) } else { to };
        let start = Instant::now();
        let outcome = connect_and_close(to);
        report.ns.push(start.elapsed().as_nanos() as u64);
        match outcome {
            Ok(()) => report.ok += 1,
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => report.refused += 1,
            Err(e) => *report.failed.entry(e.to_string()).or_default() += 1,
        }
    }
    Ok(report)
}

fn connect_and_close(to: SocketAddr) -> io::Result<()> {
    let sock = Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP))?;
    // An abortive close (RST) leaves no TIME_WAIT behind: tens of thousands of ports in
    // TIME_WAIT would make every later run's port search slower than the one before.
    sock.set_linger(Some(Duration::ZERO))?;
    sock.connect(&to.into())
}
