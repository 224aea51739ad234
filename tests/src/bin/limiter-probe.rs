//! A client the tests start inside their cgroup: it opens connections in the ways real
//! programs do and reports, one line each, what the kernel answered.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream, UdpSocket},
    os::fd::{AsRawFd, OwnedFd},
    time::Duration,
};

use clap::{Parser, Subcommand};
use socket2::{Domain, Protocol, SockRef, Socket, Type};

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
        /// Run in a network namespace of its own with the upstream inside, and report the
        /// SYNs sent ("syns N"): nothing else in that namespace sends any.
        #[arg(long)]
        own_netns: bool,
    },
    /// COUNT threads connect to TO at the same instant and hold until stdin closes.
    Race {
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
    /// Request/response exchanges on one keep-alive connection (the test upstream's framing:
    /// a 4-byte little-endian length, then the body); prints "ttfb_ns N" per exchange,
    /// measured from the first request byte written to the first response byte read.
    Exchange {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long, default_value_t = 1)]
        requests: usize,
        /// Bytes per request, framing included.
        #[arg(long, default_value_t = 64)]
        request_bytes: usize,
        /// Close right after sending the (single) request: the client gives up.
        #[arg(long)]
        give_up: bool,
        /// With --give-up: wait this long after sending before closing (a read timeout).
        #[arg(long, default_value_t = 0)]
        give_up_after_ms: u64,
        /// After the exchanges, send a last message and close at once without waiting for
        /// a reply, as PostgreSQL's Terminate does; prints "goodbye".
        #[arg(long)]
        goodbye: bool,
    },
    /// Connect once to each of COUNT loopback addresses (127.1.0.1 onwards) on PORT,
    /// closing each at once; prints "attempted N" when done.
    Spray {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        count: u32,
    },
    /// Make a socket, join the cgroup whose cgroup.procs is PROCS, then connect that socket
    /// and one made after joining to TO; prints "before OUTCOME" and "after OUTCOME", and
    /// holds both until stdin closes.
    Moved {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        procs: std::path::PathBuf,
    },
    /// In a network namespace of its own with the upstream inside: connect HELD times
    /// (prints "held"), then start QUEUED connects with a TIMEOUT_MS connect timeout, each
    /// in a thread of its own, in order, a tenth of a second apart; each prints "ok I",
    /// "timeout I" (its own timeout) or "err I ERRNO" as it ends, I its place in that order.
    /// Established connections are held. Commands on stdin: "release" closes the oldest
    /// held connection, "syns" prints "syns N", the SYNs the upstream has received.
    Queue {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        held: usize,
        #[arg(long)]
        queued: usize,
        #[arg(long)]
        timeout_ms: u64,
    },
    /// In a network namespace of its own with the upstream inside: holds one connection,
    /// then connects a socket with TCP_USER_TIMEOUT set to 12345 ms, which the limiter
    /// queues (prints "first OUTCOME"); releases the held one and connects that socket
    /// again (prints "again OUTCOME"), then prints "timers USER_TIMEOUT SYNCNT" of it.
    Requeue {
        #[arg(long)]
        to: SocketAddr,
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
    /// Like `hold`, printing "ok PEER" with what getpeername says of each connection.
    HoldPeername {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        count: usize,
        /// Connect an IPv6 socket to TO's v4-mapped address.
        #[arg(long)]
        mapped: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    match cli.command {
        Cmd::Hold {
            to,
            count,
            own_netns,
        } => {
            let upstream = own_netns.then(|| netns::enter_with_upstream(to));
            let syns_before = netns::active_opens();
            let held = hold(&mut out, count, || TcpStream::connect(to).map(|s| s.into()));
            if upstream.is_some() {
                writeln!(out, "syns {}", netns::active_opens() - syns_before).unwrap();
            }
            writeln!(out, "ready").unwrap();
            out.flush().unwrap();
            wait_for_stdin_close();
            drop(held);
        }
        Cmd::Race { to, count } => {
            let start = std::sync::Arc::new(std::sync::Barrier::new(count));
            let threads: Vec<_> = (0..count)
                .map(|_| {
                    let start = start.clone();
                    std::thread::spawn(move || {
                        start.wait();
                        TcpStream::connect(to)
                    })
                })
                .collect();
            let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            for r in &results {
                report(
                    &mut out,
                    r.as_ref().map(|_| ()).map_err(|e| {
                        std::io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0))
                    }),
                );
            }
            writeln!(out, "ready").unwrap();
            out.flush().unwrap();
            wait_for_stdin_close();
        }
        Cmd::HoldMapped { to, count } => {
            let held = hold(&mut out, count, || connect_v6_socket(to));
            writeln!(out, "ready").unwrap();
            out.flush().unwrap();
            wait_for_stdin_close();
            drop(held);
        }
        Cmd::HoldPeername { to, count, mapped } => {
            let mut held = Vec::new();
            for _ in 0..count {
                let connected = if mapped {
                    connect_v6_socket(to)
                } else {
                    TcpStream::connect(to).map(OwnedFd::from)
                };
                match connected.and_then(|fd| Ok((SockRef::from(&fd).peer_addr()?, fd))) {
                    Ok((peer, fd)) => {
                        let peer = peer.as_socket().expect("an IP peer");
                        writeln!(out, "ok {peer}").unwrap();
                        held.push(fd);
                    }
                    Err(e) => writeln!(out, "err {}", e.raw_os_error().unwrap_or(0)).unwrap(),
                }
            }
            writeln!(out, "ready").unwrap();
            out.flush().unwrap();
            wait_for_stdin_close();
            drop(held);
        }
        Cmd::Exchange {
            to,
            requests,
            request_bytes,
            give_up,
            give_up_after_ms,
            goodbye,
        } => {
            let ending = match (give_up, goodbye) {
                (true, _) => Ending::GiveUp(std::time::Duration::from_millis(give_up_after_ms)),
                (false, true) => Ending::Goodbye,
                (false, false) => Ending::Close,
            };
            exchange(&mut out, to, requests, request_bytes, ending)
        }
        Cmd::Spray { port, count } => {
            for n in 0..count {
                let ip =
                    std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(127, 1, 0, 1)) + n);
                // Refused (nobody listens) or, past the limit, shed: either way one destination more.
                let _ = TcpStream::connect((ip, port));
            }
            writeln!(out, "attempted {count}").unwrap();
        }
        Cmd::Moved { to, procs } => {
            let before = socket(to).unwrap();
            std::fs::write(&procs, std::process::id().to_string()).unwrap();
            let after = socket(to).unwrap();
            for (when, sock) in [("before", &before), ("after", &after)] {
                write!(out, "{when} ").unwrap();
                report(&mut out, sock.connect(&to.into()));
            }
            writeln!(out, "ready").unwrap();
            out.flush().unwrap();
            wait_for_stdin_close();
        }
        Cmd::Queue {
            to,
            held,
            queued,
            timeout_ms,
        } => {
            // Its threads print too: stdout cannot stay locked here.
            drop(out);
            queue(to, held, queued, Duration::from_millis(timeout_ms))
        }
        Cmd::Requeue { to } => {
            let _upstream = netns::enter_with_upstream(to);
            let held = TcpStream::connect(to).unwrap();
            let sock = socket(to).unwrap();
            sock.set_tcp_user_timeout(Some(Duration::from_millis(12345)))
                .unwrap();
            write!(out, "first ").unwrap();
            report(&mut out, sock.connect(&to.into()));
            drop(held);
            write!(out, "again ").unwrap();
            report(&mut out, sock.connect(&to.into()));
            let user_timeout = sock.tcp_user_timeout().unwrap().unwrap_or_default();
            let syncnt = syncnt(&sock);
            writeln!(out, "timers {} {syncnt}", user_timeout.as_millis()).unwrap();
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

fn queue(to: SocketAddr, held: usize, queued: usize, timeout: Duration) {
    use std::{
        collections::VecDeque,
        io::BufRead,
        sync::{Arc, Mutex},
    };

    let _upstream = netns::enter_with_upstream(to);
    let syns = netns::SynCounter::new(to.port());
    let established = Arc::new(Mutex::new(VecDeque::new()));
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").unwrap();
        out.flush().unwrap();
    };
    for _ in 0..held {
        established
            .lock()
            .unwrap()
            .push_back(TcpStream::connect(to).expect("a held connect failed"));
    }
    say("held".into());
    let start = |i: usize| {
        let established = established.clone();
        std::thread::spawn(move || match TcpStream::connect_timeout(&to, timeout) {
            Ok(stream) => {
                established.lock().unwrap().push_back(stream);
                say(format!("ok {i}"));
            }
            Err(e) => match e.raw_os_error() {
                Some(errno) => say(format!("err {i} {errno}")),
                None => say(format!("timeout {i}")),
            },
        });
    };
    for i in 0..queued {
        start(i);
        std::thread::sleep(Duration::from_millis(100));
    }
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        match line.as_str() {
            "release" => {
                // A statement of its own: the lock is released here, not held while the
                // next line is read (as a temporary in the loop's tail expression would be).
                let oldest = established.lock().unwrap().pop_front();
                drop(oldest);
            }
            "syns" => say(format!("syns {}", syns.count())),
            other => panic!("unknown command {other:?}"),
        }
    }
}

/// TCP_SYNCNT, which socket2 does not read.
fn syncnt(sock: &Socket) -> i32 {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `value`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_SYNCNT,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "getsockopt(TCP_SYNCNT) failed");
    value
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
    held
}

/// Response size of the test upstream: one first byte, then the rest after its hold.
const RESPONSE_BYTES: usize = 16;

/// How an exchange's connection ends.
enum Ending {
    /// After the last response.
    Close,
    /// After sending the single request, once it is acknowledged and this long has passed.
    GiveUp(std::time::Duration),
    /// With a last message, closed at once.
    Goodbye,
}

fn exchange(out: &mut impl Write, to: SocketAddr, requests: usize, size: usize, ending: Ending) {
    let mut stream = TcpStream::connect(to).expect("connect");
    let mut request = vec![0u8; size.max(4)];
    let body_len = (request.len() - 4) as u32;
    request[..4].copy_from_slice(&body_len.to_le_bytes());
    for _ in 0..requests {
        let start = std::time::Instant::now();
        stream.write_all(&request).expect("send the request");
        if let Ending::GiveUp(after) = ending {
            // Wait until every byte is acknowledged, so what ends is an awaited request.
            while unacked(&stream) > 0 {
                std::thread::yield_now();
            }
            std::thread::sleep(after.saturating_sub(start.elapsed()));
            writeln!(out, "gave_up").unwrap();
            return;
        }
        let mut response = [0u8; RESPONSE_BYTES];
        match stream.read_exact(&mut response[..1]) {
            Ok(()) => {
                writeln!(out, "ttfb_ns {}", start.elapsed().as_nanos()).unwrap();
                stream
                    .read_exact(&mut response[1..])
                    .expect("read the response");
            }
            Err(e) => {
                writeln!(out, "err {}", e.raw_os_error().unwrap_or(0)).unwrap();
                return;
            }
        }
    }
    if let Ending::Goodbye = ending {
        stream.write_all(&request).expect("send the last message");
        writeln!(out, "goodbye").unwrap();
    }
}

/// Bytes written but not yet acknowledged by the peer (SIOCOUTQ).
fn unacked(stream: &TcpStream) -> i32 {
    let mut queued: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one int.
    unsafe { libc::ioctl(stream.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    queued
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
        let _ = SockRef::from(&s).set_linger(Some(Duration::ZERO));
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
    let sock = socket(blackhole)?;
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads one int from a live local.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_SYNCNT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    sock.connect(&blackhole.into())
}

fn connect_v6_socket(to: SocketAddr) -> std::io::Result<OwnedFd> {
    let v6 = match to {
        SocketAddr::V4(v4) => SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port()),
        v6 => v6,
    };
    let sock = socket(v6)?;
    sock.connect(&v6.into())?;
    Ok(sock.into())
}

fn nonblocking_connect(to: SocketAddr) -> std::io::Result<OwnedFd> {
    let sock = socket(to)?;
    sock.set_nonblocking(true)?;
    match sock.connect(&to.into()) {
        Err(e) if e.raw_os_error() != Some(libc::EINPROGRESS) => Err(e),
        _ => Ok(sock.into()),
    }
}

fn socket(to: SocketAddr) -> std::io::Result<Socket> {
    Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP))
}

/// A private network namespace: SYNs counted there are this process's alone.
mod netns {
    use std::{
        net::{SocketAddr, TcpListener},
        os::fd::AsRawFd,
    };

    /// Enters a new network namespace, brings its loopback up and listens on `addr`,
    /// holding whatever is accepted for the life of the process.
    pub fn enter_with_upstream(addr: SocketAddr) -> std::thread::JoinHandle<()> {
        // SAFETY: unshare affects only this (still single-threaded) process.
        assert_eq!(
            unsafe { libc::unshare(libc::CLONE_NEWNET) },
            0,
            "unshare(CLONE_NEWNET) failed"
        );
        loopback_up();
        let listener = TcpListener::bind(addr).unwrap();
        std::thread::spawn(move || {
            let held: Vec<_> = listener.incoming().map_while(Result::ok).collect();
            drop(held);
        })
    }

    fn loopback_up() {
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        // SAFETY: ifreq is plain data; the ioctls read and write within it.
        unsafe {
            let mut req: libc::ifreq = std::mem::zeroed();
            for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
                *dst = *src as libc::c_char;
            }
            assert_eq!(
                libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req),
                0
            );
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            assert_eq!(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req), 0);
        }
    }

    /// Counts the SYNs that reach a port of this namespace's loopback, from a packet socket:
    /// a SYN held before it leaves never shows there.
    pub struct SynCounter {
        fd: std::os::fd::OwnedFd,
        port: u16,
        seen: std::cell::Cell<u64>,
    }

    impl SynCounter {
        pub fn new(port: u16) -> Self {
            let proto = (libc::ETH_P_IP as u16).to_be() as i32;
            // SAFETY: a plain socket call; the fd is owned from here on.
            let fd = unsafe {
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_DGRAM | libc::SOCK_NONBLOCK,
                    proto,
                )
            };
            assert!(fd >= 0, "cannot open a packet socket");
            // SAFETY: fd was just opened and is ours alone.
            let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            SynCounter {
                fd,
                port,
                seen: 0.into(),
            }
        }

        /// SYNs (without ACK) received for the port so far.
        pub fn count(&self) -> u64 {
            let mut buf = [0u8; 2048];
            loop {
                // SAFETY: zeroed sockaddr_ll is valid; recvfrom writes within buf and addr.
                let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
                let n = unsafe {
                    libc::recvfrom(
                        self.fd.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        0,
                        (&mut addr as *mut libc::sockaddr_ll).cast(),
                        &mut len,
                    )
                };
                if n < 0 {
                    return self.seen.get();
                }
                // Loopback shows each packet leaving and arriving: count arrivals.
                if addr.sll_pkttype == libc::PACKET_HOST && self.is_syn(&buf[..n as usize]) {
                    self.seen.set(self.seen.get() + 1);
                }
            }
        }

        fn is_syn(&self, ip: &[u8]) -> bool {
            let Some(&first) = ip.first() else {
                return false;
            };
            let tcp = usize::from(first & 0x0f) * 4;
            if ip.len() < tcp + 14 || ip[9] != libc::IPPROTO_TCP as u8 {
                return false;
            }
            let port = u16::from_be_bytes([ip[tcp + 2], ip[tcp + 3]]);
            let flags = ip[tcp + 13];
            port == self.port && flags & 0x02 != 0 && flags & 0x10 == 0
        }
    }

    /// TCP ActiveOpens of this namespace: one per SYN-sending connect.
    pub fn active_opens() -> u64 {
        procfs::process::Process::myself()
            .and_then(|p| p.snmp())
            .unwrap()
            .tcp_active_opens
    }
}
