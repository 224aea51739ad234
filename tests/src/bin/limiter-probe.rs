//! A client the tests start inside their cgroup: it opens connections in the ways real
//! programs do and reports, one line each, what the kernel answered.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream, UdpSocket},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::Duration,
};

use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Open COUNT connections to TO and hold them until stdin closes.
    Hold {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        count: usize,
    },
    /// Run ROUNDS of every way a connection can end; prints "done".
    Churn {
        /// An upstream that accepts and echoes until the client closes.
        #[arg(long)]
        echo: SocketAddr,
        /// An upstream that closes (alternately with FIN and RST) right after accepting.
        #[arg(long)]
        closer: SocketAddr,
        /// A port with no listener: the SYN is answered by a RST.
        #[arg(long)]
        refused: SocketAddr,
        /// A listener whose accept queue is full: SYNs are dropped and time out.
        #[arg(long)]
        blackhole: SocketAddr,
        #[arg(long)]
        rounds: usize,
        /// Connects left to time out (TCP_SYNCNT 1), run alongside the rounds.
        #[arg(long, default_value_t = 2)]
        syn_timeouts: usize,
    },
    /// Connect a UDP socket; prints "ok" or "err ERRNO".
    Udp {
        #[arg(long)]
        to: SocketAddr,
    },
    /// Connect an IPv6 socket to a v4-mapped address and hold it until stdin closes.
    HoldMapped {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        count: usize,
    },
}

fn main() {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    match cli.command {
        Cmd::Hold { to, count } => {
            let held = hold(&mut out, count, || TcpStream::connect(to).map(|s| s.into()));
            wait_for_stdin_close();
            drop(held);
        }
        Cmd::HoldMapped { to, count } => {
            let held = hold(&mut out, count, || connect_v6_socket(to));
            wait_for_stdin_close();
            drop(held);
        }
        Cmd::Udp { to } => {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            report(&mut out, sock.connect(to).map(|_| ()));
        }
        Cmd::Churn {
            echo,
            closer,
            refused,
            blackhole,
            rounds,
            syn_timeouts,
        } => {
            let timeouts: Vec<_> = (0..syn_timeouts)
                .map(|_| std::thread::spawn(move || syn_timeout(blackhole)))
                .collect();
            for _ in 0..rounds {
                churn_round(echo, closer, refused, blackhole);
            }
            for t in timeouts {
                let timed_out = t.join().unwrap();
                assert!(timed_out.is_err(), "a connect to the blackhole succeeded");
            }
            writeln!(out, "done").unwrap();
        }
    }
}

fn hold(
    out: &mut impl Write,
    count: usize,
    connect: impl Fn() -> std::io::Result<OwnedFd>,
) -> Vec<OwnedFd> {
    let mut held = Vec::new();
    for _ in 0..count {
        match connect() {
            Ok(fd) => {
                held.push(fd);
                writeln!(out, "ok").unwrap();
            }
            Err(e) => writeln!(out, "err {}", e.raw_os_error().unwrap_or(0)).unwrap(),
        }
    }
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    held
}

fn report(out: &mut impl Write, result: std::io::Result<()>) {
    match result {
        Ok(()) => writeln!(out, "ok").unwrap(),
        Err(e) => writeln!(out, "err {}", e.raw_os_error().unwrap_or(0)).unwrap(),
    }
}

fn wait_for_stdin_close() {
    let mut sink = Vec::new();
    let _ = std::io::stdin().lock().read_to_end(&mut sink);
}

/// Every ending a connection can have, once each.
fn churn_round(echo: SocketAddr, closer: SocketAddr, refused: SocketAddr, blackhole: SocketAddr) {
    // Client closes first, after an exchange.
    if let Ok(mut s) = TcpStream::connect(echo) {
        let _ = s.write_all(b"ping");
        let mut buf = [0u8; 4];
        let _ = s.read_exact(&mut buf);
    }
    // Server closes first; the client reads EOF, then closes.
    if let Ok(mut s) = TcpStream::connect(closer) {
        let _ = s.read(&mut [0u8; 1]);
    }
    // Client aborts with a RST (SO_LINGER 0).
    if let Ok(s) = TcpStream::connect(echo) {
        let _ = s.set_linger(Some(Duration::ZERO));
    }
    // Closed before the handshake completes: a non-blocking connect abandoned at once.
    if let Ok(fd) = nonblocking_connect(blackhole) {
        drop(fd);
    }
    // SYN answered by RST.
    let _ = TcpStream::connect(refused);
}

/// A SYN that is never answered: one retry (TCP_SYNCNT 1) keeps the timeout short.
fn syn_timeout(blackhole: SocketAddr) -> std::io::Result<()> {
    let fd = socket(blackhole)?;
    set_int(&fd, libc::IPPROTO_TCP, libc::TCP_SYNCNT, 1);
    connect(&fd, blackhole)
}

fn connect_v6_socket(to: SocketAddr) -> std::io::Result<OwnedFd> {
    let v6 = match to {
        SocketAddr::V4(v4) => SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port()),
        v6 => v6,
    };
    let fd = socket(v6)?;
    connect(&fd, v6)?;
    Ok(fd)
}

fn nonblocking_connect(to: SocketAddr) -> std::io::Result<OwnedFd> {
    let fd = socket(to)?;
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    match connect(&fd, to) {
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(fd),
        Err(e) => Err(e),
        Ok(()) => Ok(fd),
    }
}

fn socket(to: SocketAddr) -> std::io::Result<OwnedFd> {
    let family = if to.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain syscall; a non-negative result is a descriptor we own.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn set_int(fd: &OwnedFd, level: i32, name: i32, value: i32) {
    // SAFETY: setsockopt with a pointer to a live int of the right size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
}

fn connect(fd: &OwnedFd, to: SocketAddr) -> std::io::Result<()> {
    let (storage, len) = sockaddr(to);
    // SAFETY: storage holds a valid sockaddr of `len` bytes.
    let rc = unsafe { libc::connect(fd.as_raw_fd(), (&storage as *const libc::sockaddr_storage).cast(), len) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage; we fill the family-specific view.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            (storage, std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            let sin6 = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            (storage, std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

