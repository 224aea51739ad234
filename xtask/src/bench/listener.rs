//! The upstream of the connect+close loop, built to stay out of the client's way: it
//! takes connections off its accept queue once a millisecond rather than waiting in
//! `accept`, so that no connect has to wake it (a cross-core wake-up per connection costs
//! the client more than the limiter does), and it never sends the client anything, since
//! it closes a connection only when its client reset it long ago.

use std::{
    collections::VecDeque,
    net::{SocketAddr, TcpListener},
    time::Duration,
};

use anyhow::Result;
use socket2::{Domain, Socket, Type};

/// A dropped handshake costs the client a 1 s SYN retransmission: the accept queue must
/// never overflow between two visits (the kernel caps it at net.core.somaxconn).
const BACKLOG: i32 = 4096;

const VISIT_EVERY: Duration = Duration::from_millis(1);

/// Connections kept open: the oldest, closed to make room, was reset by its client about a
/// thousand connects ago.
const KEPT: usize = 1000;

/// Accepts every connection on a thread of its own (on `cpu`, when given), for the rest of
/// the run.
pub fn accept_and_keep(cpu: Option<usize>) -> Result<SocketAddr> {
    accept_and_keep_on([127, 0, 0, 1], cpu)
}

/// The same on `ip`: the unspecified address answers connects to every loopback address.
pub fn accept_and_keep_on(ip: [u8; 4], cpu: Option<usize>) -> Result<SocketAddr> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.bind(&SocketAddr::from((ip, 0)).into())?;
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    let listener: TcpListener = socket.into();
    let mut addr = listener.local_addr()?;
    if addr.ip().is_unspecified() {
        addr.set_ip([127, 0, 0, 1].into());
    }
    std::thread::spawn(move || {
        if let Some(cpu) = cpu {
            super::process::pin_this_thread(cpu).expect("pin the accepting thread");
        }
        let mut kept = VecDeque::with_capacity(KEPT + 1);
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    kept.push_back(stream);
                    if kept.len() > KEPT {
                        kept.pop_front();
                    }
                }
                // Nothing queued, or a transient error: come back later.
                Err(_) => std::thread::sleep(VISIT_EVERY),
            }
        }
    });
    Ok(addr)
}
