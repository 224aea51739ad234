//! Segments no TCP stack sent: a raw socket writes them onto loopback as a hostile process
//! with CAP_NET_RAW could.

use std::net::{SocketAddr, SocketAddrV4};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// The client ends (local addresses) of the established TCP connections to `upstream`.
pub fn client_ends(upstream: SocketAddr) -> Vec<SocketAddr> {
    procfs::net::tcp()
        .expect("cannot read /proc/net/tcp")
        .into_iter()
        .filter(|e| e.remote_address == upstream && e.state == procfs::net::TcpState::Established)
        .map(|e| e.local_address)
        .collect()
}

/// Sends a RST from `from` to `to` with sequence number `seq` and a valid checksum.
pub fn forge_rst(from: SocketAddrV4, to: SocketAddrV4, seq: u32) {
    const RST: u8 = 0x04;
    let mut packet = [0u8; 40];
    let (ip, tcp) = packet.split_at_mut(20);
    ip[0] = 0x45; // IPv4, 5 words of header
    ip[2..4].copy_from_slice(&40u16.to_be_bytes());
    ip[8] = 64; // TTL
    ip[9] = libc::IPPROTO_TCP as u8;
    ip[12..16].copy_from_slice(&from.ip().octets());
    ip[16..20].copy_from_slice(&to.ip().octets());
    tcp[0..2].copy_from_slice(&from.port().to_be_bytes());
    tcp[2..4].copy_from_slice(&to.port().to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[12] = 5 << 4; // 5 words of header
    tcp[13] = RST;
    let checksum = tcp_checksum(from, to, tcp);
    tcp[16..18].copy_from_slice(&checksum.to_be_bytes());
    // IPPROTO_RAW: we give the IP header; the kernel fills in its checksum and id.
    let socket = Socket::new(
        Domain::IPV4,
        Type::RAW,
        Some(Protocol::from(libc::IPPROTO_RAW)),
    )
    .expect("cannot open a raw socket (root needed)");
    socket
        .send_to(&packet, &SockAddr::from(SocketAddr::V4(to)))
        .expect("cannot send the forged RST");
}

/// The TCP checksum: the one's complement sum over the pseudo-header and the segment.
fn tcp_checksum(from: SocketAddrV4, to: SocketAddrV4, segment: &[u8]) -> u16 {
    let mut bytes = Vec::with_capacity(12 + segment.len());
    bytes.extend_from_slice(&from.ip().octets());
    bytes.extend_from_slice(&to.ip().octets());
    bytes.extend_from_slice(&[0, libc::IPPROTO_TCP as u8]);
    bytes.extend_from_slice(&(segment.len() as u16).to_be_bytes());
    bytes.extend_from_slice(segment);
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|w| u32::from(w[0]) << 8 | u32::from(*w.get(1).unwrap_or(&0)))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
