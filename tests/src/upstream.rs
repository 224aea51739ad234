//! Loopback upstreams in the test process: how they treat a connection, and addresses
//! that refuse or never answer.

use std::{
    io::Write,
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

/// How a loopback upstream treats the connections it accepts.
#[derive(Clone, Copy)]
pub enum Behaviour {
    /// Keep them open until the client closes.
    Hold,
    /// Echo what arrives until the client closes.
    Echo,
    /// Close at once, alternately with FIN and with RST.
    Close,
    /// Answer each framed request (4-byte little-endian length, then the body) with a
    /// first byte after `first_byte`, and the rest of the response after `hold`.
    Respond {
        first_byte: Duration,
        hold: Duration,
    },
    /// Read one framed request, then reset the connection.
    ResetAfterRequest,
    /// Read one framed request, then close the connection (FIN), as a server answers a
    /// client's goodbye.
    CloseAfterRequest,
}

/// Response size of `Behaviour::Respond`, which the probe knows too.
const RESPONSE_BYTES: usize = 16;

/// Reads one framed request; false at end of stream.
fn read_request(stream: &mut TcpStream) -> bool {
    use std::io::Read;
    let mut len = [0u8; 4];
    if stream.read_exact(&mut len).is_err() {
        return false;
    }
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    stream.read_exact(&mut body).is_ok()
}

fn serve(mut stream: TcpStream, behaviour: Behaviour) {
    match behaviour {
        Behaviour::Respond { first_byte, hold } => {
            while read_request(&mut stream) {
                std::thread::sleep(first_byte);
                let _ = stream.write_all(&[0]);
                std::thread::sleep(hold);
                let _ = stream.write_all(&[0; RESPONSE_BYTES - 1]);
            }
        }
        Behaviour::CloseAfterRequest => {
            read_request(&mut stream);
        }
        Behaviour::ResetAfterRequest => {
            if read_request(&mut stream) {
                let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            }
        }
        Behaviour::Echo => {
            let mut reader = stream.try_clone().unwrap();
            let _ = std::io::copy(&mut reader, &mut stream);
        }
        Behaviour::Hold | Behaviour::Close => unreachable!("served inline"),
    }
}

/// A loopback server in the test process (outside the limited cgroup).
pub struct Upstream {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl Upstream {
    pub fn start(bind: &str, behaviour: Behaviour) -> Self {
        Self::serve(TcpListener::bind(bind).unwrap(), behaviour)
    }

    pub(crate) fn serve(listener: TcpListener, behaviour: Behaviour) -> Self {
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let held = Arc::new(Mutex::new(Vec::new()));
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                match behaviour {
                    Behaviour::Hold => held.lock().unwrap().push(stream),
                    Behaviour::Echo
                    | Behaviour::Respond { .. }
                    | Behaviour::ResetAfterRequest
                    | Behaviour::CloseAfterRequest => {
                        std::thread::spawn(move || serve(stream, behaviour));
                    }
                    Behaviour::Close => {
                        if n % 2 == 1 {
                            let _ =
                                socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                        }
                        drop(stream);
                    }
                }
            }
        });
        Upstream { addr, accepted }
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// An address nobody listens on (a SYN to it is answered by a RST), free to bind.
pub fn closed_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A listener whose accept queue is full: SYNs to it are dropped, so connects time out.
pub struct Blackhole {
    pub addr: SocketAddr,
    _listener: TcpListener,
    _filler: TcpStream,
}

impl Blackhole {
    pub fn new() -> Self {
        use std::os::fd::AsRawFd;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        // SAFETY: listen() again on our own socket only shrinks its backlog: with 0, one
        // queued connection fills the accept queue.
        unsafe { libc::listen(listener.as_raw_fd(), 0) };
        let addr = listener.local_addr().unwrap();
        let filler = TcpStream::connect(addr).unwrap();
        Blackhole {
            addr,
            _listener: listener,
            _filler: filler,
        }
    }
}

impl Default for Blackhole {
    fn default() -> Self {
        Self::new()
    }
}
