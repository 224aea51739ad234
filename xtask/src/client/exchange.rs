//! Keep-alive request/response traffic at a steady rate: one latency sample per exchange.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};
use serde::{Deserialize, Serialize};

/// Bytes per request; the echo upstream sends the same number back.
const REQUEST_BYTES: usize = 64;

#[derive(Debug, Serialize, Deserialize)]
pub struct ExchangeReport {
    pub exchanges: u64,
    pub seconds: f64,
}

impl ExchangeReport {
    pub fn per_second(&self) -> f64 {
        self.exchanges as f64 / self.seconds
    }
}

pub fn run(to: &[SocketAddr], per_destination: usize, rate: f64, threads: usize) -> Result<()> {
    ensure!(
        rate > 0.0 && threads > 0,
        "--rate and --threads must be positive"
    );
    let mut groups: Vec<Vec<TcpStream>> = (0..threads).map(|_| Vec::new()).collect();
    let connections = to
        .iter()
        .flat_map(|a| std::iter::repeat_n(a, per_destination));
    for (n, addr) in connections.enumerate() {
        let stream = TcpStream::connect(addr).with_context(|| format!("connect to {addr}"))?;
        stream.set_nodelay(true)?;
        groups[n % threads].push(stream);
    }
    groups.retain(|g| !g.is_empty());
    println!("ready");

    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let per_thread = rate / groups.len() as f64;
    let workers: Vec<_> = groups
        .into_iter()
        .map(|group| {
            let stop = stop.clone();
            std::thread::spawn(move || paced(group, per_thread, &stop))
        })
        .collect();
    // The benchmark closes stdin when its measurement interval is over.
    std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink())?;
    stop.store(true, Ordering::Relaxed);
    let mut exchanges = 0;
    for worker in workers {
        exchanges += worker.join().expect("an exchange thread panicked")?;
    }
    super::print(&ExchangeReport {
        exchanges,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Round-robin over `streams`, one exchange every 1/`rate` s on an absolute schedule, so a
/// late exchange is made up for rather than lost.
fn paced(mut streams: Vec<TcpStream>, rate: f64, stop: &AtomicBool) -> Result<u64> {
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut due = Instant::now();
    let (request, mut response) = ([1u8; REQUEST_BYTES], [0u8; REQUEST_BYTES]);
    let mut done = 0u64;
    for i in (0..streams.len()).cycle() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        due += period;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let stream = &mut streams[i];
        stream.write_all(&request).context("send a request")?;
        stream
            .read_exact(&mut response)
            .context("read a response")?;
        done += 1;
    }
    Ok(done)
}
