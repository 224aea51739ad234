//! Open-loop HTTP/1.1 requests, Poisson arrivals at a fixed rate whatever the answers do,
//! each on a connection of its own: a service taking requests from its own users, as in
//! production. Every request's fate is reported.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{ensure, Result};
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// An answer's first byte came.
    Answered,
    /// connect() failed: what the limiter does to a connect it refuses.
    Refused,
    /// No first byte within the timeout: given up on, its connection closed.
    TimedOut,
    /// The connection failed after it was made.
    Failed,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sent {
    /// Seconds from "ready" to the connect.
    pub at_s: f64,
    /// Seconds from the connect to the fate.
    pub seconds: f64,
    pub fate: Fate,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct OpenLoopReport {
    pub requests: Vec<Sent>,
}

/// Sends until stdin closes, then waits for the requests still out (at most `timeout`),
/// and prints the report.
pub fn run(to: SocketAddr, rate: f64, timeout: Duration) -> Result<()> {
    ensure!(rate > 0.0, "--rate must be positive");
    let gaps = Exp::new(rate).expect("a positive rate");
    let mut rng = Pcg64Mcg::seed_from_u64(1);
    let sent = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let waiter = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // The lab closes stdin when its phases are over.
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            stop.store(true, Ordering::Relaxed);
        })
    };
    println!("ready");
    let mut next = Instant::now();
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        next += Duration::from_secs_f64(gaps.sample(&mut rng));
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let sent = sent.clone();
        out.push(std::thread::spawn(move || {
            let at = Instant::now();
            let fate = request(to, timeout);
            sent.lock()
                .expect("no thread panics holding it")
                .push(Sent {
                    at_s: at.duration_since(started).as_secs_f64(),
                    seconds: at.elapsed().as_secs_f64(),
                    fate,
                });
        }));
    }
    for thread in out {
        let _ = thread.join();
    }
    let _ = waiter.join();
    let mut requests = std::mem::take(&mut *sent.lock().expect("every thread joined"));
    requests.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    super::print(&OpenLoopReport { requests })
}

fn request(to: SocketAddr, timeout: Duration) -> Fate {
    let Ok(mut stream) = TcpStream::connect(to) else {
        return Fate::Refused;
    };
    let asked = stream.set_read_timeout(Some(timeout)).and_then(|()| {
        stream.write_all(b"GET / HTTP/1.1\r\nHost: upstream\r\nConnection: close\r\n\r\n")
    });
    if asked.is_err() {
        return Fate::Failed;
    }
    match stream.read(&mut [0; 64]) {
        Ok(n) if n > 0 => Fate::Answered,
        Ok(_) => Fate::Failed,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Fate::TimedOut
        }
        Err(_) => Fate::Failed,
    }
}
