//! Connection set-up cost: connect and close, one connection after another, each timed.

use std::{
    collections::BTreeMap,
    io,
    net::{SocketAddr, TcpStream},
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

pub fn run(to: SocketAddr, count: usize, hold_first: bool) -> Result<ConnectLoopReport> {
    let _held = hold_first
        .then(|| TcpStream::connect(to).context("the connection held for the whole loop"))
        .transpose()?;
    let mut report = ConnectLoopReport {
        ok: 0,
        refused: 0,
        failed: BTreeMap::new(),
        ns: Vec::with_capacity(count),
    };
    for _ in 0..count {
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
