//! Counting the outbound connections that already existed when the agent attached.
//!
//! The connect hook never saw the sockets that predate the attach, so their slots are
//! taken here: each socket is borrowed from its process with pidfd_getfd, given per-socket
//! state (so `cgroup/sock_release` returns its slot), and counted in its destination.
//! Holding the borrowed descriptors while writing makes this exact: none of these sockets
//! can be released before its state exists, and no connect hook is attached yet.

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    os::fd::{FromRawFd, OwnedFd},
};

use anyhow::Result;
use aya::maps::{MapData, SkStorage};
use limiter_common::{DestKey, DestState, SockState, SOCK_CONNECT_DONE};
use nix::sys::socket::{getpeername, getsockname, SockaddrStorage};
use procfs::{
    net::TcpState,
    process::{FDTarget, Process},
};
use tracing::{debug, warn};

use crate::{cgroup::Cgroup, clock::monotonic_ns, config::Mode, maps::Maps};

/// BPF_NOEXIST: a socket admitted concurrently already has its state.
const NOEXIST: u64 = 1;
const TCP_LISTEN: u8 = 10;
const TCP_CLOSE: u8 = 7;

struct Outbound {
    fd: OwnedFd,
    dest: DestKey,
}

pub fn adopt(
    cgroup: &Cgroup,
    maps: &mut Maps,
    sockets: &mut SkStorage<&mut MapData, SockState>,
    default_mode: Mode,
) -> Result<usize> {
    let mut seen = HashSet::new();
    let mut found = Vec::new();
    for pid in cgroup.pids()? {
        outbound_sockets(pid, &mut seen, &mut found);
    }
    found.retain(|o| {
        let mode = maps
            .policies
            .get(&o.dest, 0)
            .ok()
            .and_then(|p| Mode::from_abi(p.mode))
            .unwrap_or(default_mode);
        mode != Mode::Off
    });

    let now = monotonic_ns();
    let mut per_dest: HashMap<DestKey, i64> = HashMap::new();
    for o in &found {
        *per_dest.entry(o.dest).or_default() += 1;
    }
    for (&dest, &count) in &per_dest {
        let state = DestState {
            created_ns: now,
            last_active_ns: now,
            inflight: count,
            admitted: count as u64,
            ..Default::default()
        };
        // More destinations than the table holds: the rest stay untracked, as the kernel
        // would leave them.
        if let Err(e) = maps.dests.insert(dest, state, 0) {
            warn!(destination = %dest.socket_addr(), "existing connections not counted: {e}");
            found.retain(|o| o.dest != dest);
        }
    }
    for o in &found {
        let state = SockState {
            dest: o.dest,
            holds_slot: 1,
            dest_created_ns: now,
            established: 1,
            flags: SOCK_CONNECT_DONE,
            ..Default::default()
        };
        sockets.insert(&o.fd, state, NOEXIST)?;
    }
    Ok(found.len())
}

/// The outbound TCP connections held by `pid` that no earlier process shared with it.
fn outbound_sockets(pid: i32, seen: &mut HashSet<u64>, out: &mut Vec<Outbound>) {
    // The process may exit at any point: whatever is gone is simply not counted.
    let Ok(process) = Process::new(pid) else {
        return;
    };
    let Ok(fds) = process.fd() else {
        return;
    };
    let Some(pidfd) = pidfd_open(pid) else {
        return;
    };
    let listening = listening_ports(&process);
    for info in fds.flatten() {
        let FDTarget::Socket(inode) = info.target else {
            continue;
        };
        if !seen.insert(inode) {
            continue;
        }
        let Some(fd) = pidfd_getfd(&pidfd, info.fd) else {
            continue;
        };
        if let Some(dest) = outbound_destination(&fd, &listening) {
            debug!(pid, %dest, "pre-existing connection");
            out.push(Outbound {
                fd,
                dest: DestKey::new(dest),
            });
        }
    }
}

fn outbound_destination(fd: &OwnedFd, listening: &HashSet<u16>) -> Option<SocketAddr> {
    let is_tcp = int_sockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE)? == libc::SOCK_STREAM
        && int_sockopt(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)? == libc::IPPROTO_TCP;
    if !is_tcp {
        return None;
    }
    let state = tcp_state(fd)?;
    if state == TCP_LISTEN || state == TCP_CLOSE {
        return None;
    }
    let local =
        to_socket_addr(getsockname::<SockaddrStorage>(std::os::fd::AsRawFd::as_raw_fd(fd)).ok()?)?;
    // A connection accepted on one of the process's listening ports is inbound.
    if listening.contains(&local.port()) {
        return None;
    }
    to_socket_addr(getpeername::<SockaddrStorage>(std::os::fd::AsRawFd::as_raw_fd(fd)).ok()?)
}

fn to_socket_addr(s: SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}

fn tcp_state(fd: &OwnedFd) -> Option<u8> {
    // SAFETY: tcp_info is plain data, valid when all zero.
    let info: libc::tcp_info = raw_sockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, unsafe {
        std::mem::zeroed()
    })?;
    Some(info.tcpi_state)
}

fn int_sockopt(fd: &OwnedFd, level: i32, name: i32) -> Option<i32> {
    raw_sockopt(fd, level, name, 0i32)
}

/// getsockopt into a plain-data `T`, for options nix does not wrap.
fn raw_sockopt<T: Copy>(fd: &OwnedFd, level: i32, name: i32, mut value: T) -> Option<T> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `value`, a plain-data T.
    let rc = unsafe {
        libc::getsockopt(
            std::os::fd::AsRawFd::as_raw_fd(fd),
            level,
            name,
            (&mut value as *mut T).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(value)
}

/// Local ports in LISTEN state in the process's network namespace.
fn listening_ports(process: &Process) -> HashSet<u16> {
    [process.tcp(), process.tcp6()]
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.state == TcpState::Listen)
        .map(|entry| entry.local_address.port())
        .collect()
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: plain syscall; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn pidfd_getfd(pidfd: &OwnedFd, fd: i32) -> Option<OwnedFd> {
    // SAFETY: plain syscall; a non-negative result is a new descriptor we own.
    let dup = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            std::os::fd::AsRawFd::as_raw_fd(pidfd),
            fd,
            0,
        )
    };
    (dup >= 0).then(|| unsafe { OwnedFd::from_raw_fd(dup as i32) })
}
