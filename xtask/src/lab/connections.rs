//! Connections held to the upstream, counted from the kernel's socket table whether or not
//! a limiter is there to count them.

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::{Context, Result};

/// TCP states of a connection that holds the upstream's attention or a slot: connecting,
/// established, and closed by the peer but not yet by us.
const HELD_STATES: [&str; 3] = ["02", "01", "08"];

/// Connections from this network namespace to `to` right now.
pub fn held(to: SocketAddrV4) -> Result<usize> {
    let table = std::fs::read_to_string("/proc/net/tcp").context("cannot read /proc/net/tcp")?;
    Ok(count(&table, to))
}

/// Rows of /proc/net/tcp (`sl local rem st ...`) whose remote end is `to` and whose state
/// is held. Addresses are the 32-bit word as stored, printed in hex; ports are plain hex.
fn count(table: &str, to: SocketAddrV4) -> usize {
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state)) = (fields.get(2), fields.get(3)) else {
                return false;
            };
            HELD_STATES.contains(state) && parse(remote) == Some(to)
        })
        .count()
}

fn parse(hex: &str) -> Option<SocketAddrV4> {
    let (addr, port) = hex.split_once(':')?;
    let word = u32::from_str_radix(addr, 16).ok()?;
    Some(SocketAddrV4::new(
        Ipv4Addr::from(word.to_ne_bytes()),
        u16::from_str_radix(port, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_held_connections_to_the_address_and_port_count() {
        let to = SocketAddrV4::new(Ipv4Addr::new(198, 18, 3, 2), 8080);
        let remote = format!("{:08X}:1F90", u32::from_ne_bytes([198, 18, 3, 2]));
        let row = |state: &str, rem: &str| {
            format!("   0: 0100007F:A000 {rem} {state} 00000000:00000000 00:00000000 00000000     0        0 1 1 0 10 0")
        };
        let table = [
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode".to_string(),
            row("01", &remote),
            row("02", &remote),
            row("08", &remote),
            row("06", &remote), // TIME_WAIT: closed
            row("0A", &remote), // a listener
            row("01", &remote.replace(":1F90", ":1F91")),
            row("01", "0100007F:1F90"),
        ]
        .join("\n");
        assert_eq!(count(&table, to), 3);
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
}
