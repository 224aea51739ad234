//! A loopback HTTP/1.1 server with a response delay that can change while it runs.

use std::{
    io::{BufRead, BufReader, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

/// A loopback HTTP/1.1 server whose response delay can be changed while it runs.
pub struct SlowHttp {
    pub addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
}

impl SlowHttp {
    pub fn start(delay_ms: u64) -> Self {
        let (listener, server) = Self::bind(delay_ms);
        let shared = server.delay_ms.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let delay = shared.clone();
                std::thread::spawn(move || serve_http(stream, || sleep_ms(&delay)));
            }
        });
        server
    }

    /// A server with `workers` threads, each answering one connection at a time: the rest wait
    /// in the listen queue, connected, as they do at an upstream with a fixed worker pool. Once
    /// more clients ask than it has workers, its latency grows with their number.
    pub fn with_workers(delay_ms: u64, workers: usize) -> Self {
        let (listener, server) = Self::bind(delay_ms);
        let listener = Arc::new(listener);
        for _ in 0..workers {
            let (listener, delay) = (listener.clone(), server.delay_ms.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming().map_while(Result::ok) {
                    serve_http(stream, || sleep_ms(&delay));
                }
            });
        }
        server
    }

    /// A listener on a loopback port and the server it will answer for.
    fn bind(delay_ms: u64) -> (TcpListener, Self) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = SlowHttp {
            addr: listener.local_addr().unwrap(),
            delay_ms: Arc::new(AtomicU64::new(delay_ms)),
        };
        (listener, server)
    }

    pub fn set_delay_ms(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

fn sleep_ms(ms: &AtomicU64) {
    std::thread::sleep(Duration::from_millis(ms.load(Ordering::SeqCst)));
}

/// Serves HTTP/1.1 requests on `stream`, each answered once `serve` returns, until the
/// client closes or asks to.
pub fn serve_http(stream: TcpStream, mut serve: impl FnMut()) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut close = false;
        let mut line = String::new();
        // The request head, up to its blank line; bodies are not expected.
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => close |= line.to_ascii_lowercase().starts_with("connection: close"),
            }
        }
        serve();
        let head = if close { "Connection: close\r\n" } else { "" };
        let response = format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n{head}\r\nok");
        if writer.write_all(response.as_bytes()).is_err() || close {
            return;
        }
    }
}
