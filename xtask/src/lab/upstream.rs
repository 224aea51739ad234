//! The upstream nginx proxies to: HTTP in a network namespace of its own behind a veth
//! pair, served as its shape says: a fixed pool of workers, with connections past it
//! waiting in the listen queue, or cores shared by every connection. Each request's service
//! time is drawn around a median that changes while it runs, as when the upstream's own
//! dependency slows down.

use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{ensure, Result};
use limiter_integration_tests::{serve_http, TestNetns};
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};
use rand_pcg::Pcg64Mcg;

use super::shape::Servers;

/// Connections the kernel queues for the workers beyond the ones they serve.
const BACKLOG: i32 = 1024;
/// How often a request served on shared cores is credited the work done since.
const SHARE_SLICE: Duration = Duration::from_millis(2);

pub struct Upstream {
    pub addr: SocketAddr,
    median_us: Arc<AtomicU64>,
    busy: Arc<AtomicUsize>,
    /// Deleting it takes the veth pair with it; the servers' listener keeps the namespace
    /// itself until the lab exits.
    _net: TestNetns,
}

/// What a serving thread shares with the others.
#[derive(Clone)]
struct Service {
    median_us: Arc<AtomicU64>,
    sigma: f64,
    busy: Arc<AtomicUsize>,
}

impl Service {
    /// A service time around the current median.
    fn draw(&self, rng: &mut Pcg64Mcg) -> Duration {
        let median = self.median_us.load(Ordering::Relaxed) as f64 / 1e6;
        if self.sigma == 0.0 {
            return Duration::from_secs_f64(median);
        }
        let spread = LogNormal::new(median.ln(), self.sigma).expect("a positive sigma");
        Duration::from_secs_f64(spread.sample(rng))
    }

    /// Serves the connection's requests, each by sleeping its service time.
    fn on_worker(&self, stream: TcpStream, rng: &mut Pcg64Mcg) {
        self.busy.fetch_add(1, Ordering::Relaxed);
        serve_http(stream, || std::thread::sleep(self.draw(rng)));
        self.busy.fetch_sub(1, Ordering::Relaxed);
    }

    /// Serves the connection's requests on `cores` shared with every request being served:
    /// each is credited, slice by slice, the time that passed times its share of the cores.
    fn on_cores(&self, stream: TcpStream, rng: &mut Pcg64Mcg, cores: usize) {
        serve_http(stream, || {
            let mut work = self.draw(rng).as_secs_f64();
            let serving = self.busy.fetch_add(1, Ordering::Relaxed) + 1;
            let mut share = (cores as f64 / serving as f64).min(1.0);
            while work > 0.0 {
                let started = Instant::now();
                std::thread::sleep(SHARE_SLICE.min(Duration::from_secs_f64(work / share)));
                work -= started.elapsed().as_secs_f64() * share;
                share = (cores as f64 / self.busy.load(Ordering::Relaxed) as f64).min(1.0);
            }
            self.busy.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

impl Upstream {
    /// An upstream of `servers` whose service times are drawn around `median` with `sigma`
    /// (0: exactly the median).
    pub fn start(servers: Servers, sigma: f64, median: Duration) -> Result<Self> {
        let net = TestNetns::new();
        let listener = Arc::new(net.listener());
        // SAFETY: listen() again on our own listening socket only changes its queue's length.
        let queued = unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) };
        ensure!(queued == 0, "listen: {}", std::io::Error::last_os_error());
        let service = Service {
            median_us: Arc::new(AtomicU64::new(median.as_micros() as u64)),
            sigma,
            busy: Arc::new(AtomicUsize::new(0)),
        };
        match servers {
            Servers::Workers(workers) => {
                for seed in 0..workers as u64 {
                    let (listener, service) = (listener.clone(), service.clone());
                    std::thread::spawn(move || {
                        let mut rng = Pcg64Mcg::seed_from_u64(seed);
                        for stream in connections(&listener) {
                            service.on_worker(stream, &mut rng);
                        }
                    });
                }
            }
            Servers::Cores(cores) => {
                let (listener, service) = (listener.clone(), service.clone());
                std::thread::spawn(move || accept_each(&listener, service, cores));
            }
            Servers::Unbounded => {
                let (listener, service) = (listener.clone(), service.clone());
                std::thread::spawn(move || accept_each(&listener, service, usize::MAX));
            }
        }
        Ok(Upstream {
            addr: listener.local_addr()?,
            median_us: service.median_us,
            busy: service.busy,
            _net: net,
        })
    }

    pub fn set_service_time(&self, median: Duration) {
        self.median_us
            .store(median.as_micros() as u64, Ordering::Relaxed);
    }

    /// Workers holding a connection, or requests on the cores, right now.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }
}

/// A thread for every connection, served on the shared cores.
fn accept_each(listener: &TcpListener, service: Service, cores: usize) {
    let mut seeds = Pcg64Mcg::seed_from_u64(0);
    for stream in connections(listener) {
        let (service, seed) = (service.clone(), seeds.random());
        std::thread::spawn(move || {
            service.on_cores(stream, &mut Pcg64Mcg::seed_from_u64(seed), cores)
        });
    }
}

/// The listener's connections, for ever: a failed accept (a connection reset while queued)
/// is skipped.
fn connections(listener: &TcpListener) -> impl Iterator<Item = TcpStream> + '_ {
    listener.incoming().filter_map(Result::ok)
}
