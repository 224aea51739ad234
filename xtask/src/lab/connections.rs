//! Connections held to the upstream, counted from the kernel's socket table whether or not
//! a limiter is there to count them.

use std::{
    collections::HashSet,
    net::{SocketAddr, SocketAddrV4},
    path::Path,
};

use anyhow::{Context, Result};
use procfs::{
    net::{TcpNetEntry, TcpState},
    process::{FDTarget, Process},
};

/// TCP states of a connection that holds the upstream's attention or a slot: connecting,
/// established, and closed by the peer but not yet by us.
const HELD_STATES: [TcpState; 3] = [
    TcpState::SynSent,
    TcpState::Established,
    TcpState::CloseWait,
];

/// Connections from this network namespace to `to` right now.
pub fn held(to: SocketAddrV4) -> Result<usize> {
    let table = procfs::net::tcp().context("cannot read /proc/net/tcp")?;
    Ok(count(&table, to))
}

/// Connections to `to` that the processes of the cgroup at `cgroup` hold right now: their
/// sockets' inodes picked out of the table.
pub fn held_by(cgroup: &Path, to: SocketAddrV4) -> Result<usize> {
    let procs = cgroup.join("cgroup.procs");
    let pids = std::fs::read_to_string(&procs)
        .with_context(|| format!("cannot read {}", procs.display()))?;
    let mut sockets = HashSet::new();
    for pid in pids.lines().filter_map(|l| l.parse().ok()) {
        // A process that exits while it is read holds nothing any more.
        let Ok(fds) = Process::new(pid).and_then(|p| p.fd()) else {
            continue;
        };
        for fd in fds.flatten() {
            if let FDTarget::Socket(inode) = fd.target {
                sockets.insert(inode);
            }
        }
    }
    let table = procfs::net::tcp().context("cannot read /proc/net/tcp")?;
    Ok(count(
        table.iter().filter(|e| sockets.contains(&e.inode)),
        to,
    ))
}

/// The connections whose remote end is `to` and whose state is held, each once: the kernel
/// writes the table a page at a time, so a row can be read twice while sockets come and go.
fn count<'a>(table: impl IntoIterator<Item = &'a TcpNetEntry>, to: SocketAddrV4) -> usize {
    table
        .into_iter()
        .filter(|e| is_held(e, to))
        .map(|e| e.local_address)
        .collect::<HashSet<_>>()
        .len()
}

fn is_held(entry: &TcpNetEntry, to: SocketAddrV4) -> bool {
    HELD_STATES.contains(&entry.state) && entry.remote_address == SocketAddr::V4(to)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use procfs::{net::TcpNetEntries, FromBufReadSI};

    use super::*;

    #[test]
    fn only_held_connections_to_the_address_and_port_count() {
        let to = SocketAddrV4::new(Ipv4Addr::new(198, 18, 3, 2), 8080);
        let remote = format!("{:08X}:1F90", u32::from_ne_bytes([198, 18, 3, 2]));
        let row = |local: &str, state: &str, rem: &str| {
            format!("   0: 0100007F:{local} {rem} {state} 00000000:00000000 00:00000000 00000000     0        0 1 1 0 10 0")
        };
        let table = [
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode".to_string(),
            row("A000", "01", &remote),
            row("A000", "01", &remote), // the same connection read twice
            row("A001", "02", &remote),
            row("A002", "08", &remote),
            row("A003", "06", &remote), // TIME_WAIT: closed
            row("A004", "0A", &remote), // a listener
            row("A005", "01", &remote.replace(":1F90", ":1F91")),
            row("A006", "01", "0100007F:1F90"),
        ]
        .join("\n");
        let rows = TcpNetEntries::from_buf_read(table.as_bytes(), procfs::current_system_info())
            .unwrap()
            .0;
        assert_eq!(count(&rows, to), 3);
    }

    #[test]
    fn this_process_sees_its_own_loopback_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(addr) = listener.local_addr().unwrap() else {
            unreachable!("bound to IPv4")
        };
        let before = held(addr).unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        assert_eq!(held(addr).unwrap(), before + 1);
    }

    #[test]
    fn a_cgroup_holds_only_its_own_processes_connections() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(addr) = listener.local_addr().unwrap() else {
            unreachable!("bound to IPv4")
        };
        let dir = tempfile::tempdir().unwrap();
        let procs = dir.path().join("cgroup.procs");
        std::fs::write(&procs, format!("{}\n", std::process::id())).unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        assert_eq!(held_by(dir.path(), addr).unwrap(), 1, "this process's");
        std::fs::write(&procs, "").unwrap();
        assert_eq!(held_by(dir.path(), addr).unwrap(), 0, "another cgroup's");
    }
}
