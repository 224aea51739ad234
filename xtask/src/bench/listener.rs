//! The upstream of the connect+close loop: it only has to keep its accept queue from
//! overflowing, since a dropped handshake costs the client a 1 s SYN retransmission.

use std::net::{SocketAddr, TcpListener};

use anyhow::Result;
use socket2::{Domain, Socket, Type};

/// The kernel caps it at net.core.somaxconn.
const BACKLOG: i32 = 4096;

/// Accepts and closes every connection, on a thread of its own (on `cpu`, when given), for
/// the rest of the run.
pub fn accept_and_close(cpu: Option<usize>) -> Result<SocketAddr> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())?;
    socket.listen(BACKLOG)?;
    let listener: TcpListener = socket.into();
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        if let Some(cpu) = cpu {
            super::process::pin_this_thread(cpu).expect("pin the accepting thread");
        }
        for stream in listener.incoming() {
            drop(stream);
        }
    });
    Ok(addr)
}
