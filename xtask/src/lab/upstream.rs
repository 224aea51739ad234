//! The upstream nginx proxies to: HTTP with a fixed pool of workers, as real servers have,
//! in a network namespace of its own behind a veth pair. Connections past the pool wait in
//! the listen queue; the service time changes while it runs, as when its own dependency
//! slows down.

use std::{
    net::SocketAddr,
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use anyhow::{ensure, Result};
use limiter_integration_tests::{serve_http, TestNetns};

/// Requests served at once.
pub const WORKERS: usize = 32;
/// Connections the kernel queues for the workers beyond the ones they serve.
const BACKLOG: i32 = 1024;

pub const HEALTHY: Duration = Duration::from_millis(30);
/// 27 times the healthy service time.
pub const SLOW: Duration = Duration::from_millis(810);

pub struct Upstream {
    pub addr: SocketAddr,
    service_ms: Arc<AtomicU64>,
    busy: Arc<AtomicUsize>,
    /// Deleting it takes the veth pair with it; the workers' listener keeps the namespace
    /// itself until the lab exits.
    _net: TestNetns,
}

impl Upstream {
    pub fn start() -> Result<Self> {
        let net = TestNetns::new();
        let listener = Arc::new(net.listener());
        // SAFETY: listen() again on our own listening socket only changes its queue's length.
        let queued = unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) };
        ensure!(queued == 0, "listen: {}", std::io::Error::last_os_error());
        let service_ms = Arc::new(AtomicU64::new(HEALTHY.as_millis() as u64));
        let busy = Arc::new(AtomicUsize::new(0));
        for _ in 0..WORKERS {
            let (listener, service_ms, busy) = (listener.clone(), service_ms.clone(), busy.clone());
            std::thread::spawn(move || loop {
                let Ok((stream, _)) = listener.accept() else {
                    continue;
                };
                busy.fetch_add(1, Ordering::Relaxed);
                serve_http(stream, &service_ms);
                busy.fetch_sub(1, Ordering::Relaxed);
            });
        }
        Ok(Upstream {
            addr: listener.local_addr()?,
            service_ms,
            busy,
            _net: net,
        })
    }

    pub fn set_service_time(&self, service: Duration) {
        self.service_ms
            .store(service.as_millis() as u64, Ordering::Relaxed);
    }

    /// Workers holding a connection right now.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }
}

/// Requests per second the pool serves at `service`: its workers over the service time.
pub fn capacity(service: Duration) -> f64 {
    WORKERS as f64 / service.as_secs_f64()
}
