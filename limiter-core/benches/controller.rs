//! Nanoseconds per sample and per update, for the figures in docs/control.md.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use limiter_core::{Algorithm, ControlConfig, Controller, DestinationController};

const MS: u64 = 1_000_000;

/// A controller that has seen a few minutes of traffic, with an open window.
fn warmed(algorithm: Algorithm) -> (DestinationController, u64) {
    let mut c = DestinationController::new(&ControlConfig::new(algorithm), 0);
    let mut now = 0;
    for tick in 0..3_000u64 {
        now += 100 * MS;
        for i in 0..20 {
            c.on_sample(now, (80 + (tick + i * 7) % 40) * MS, 30);
        }
        c.update(now);
    }
    (c, now)
}

fn per_sample(crit: &mut Criterion) {
    let (mut c, now) = warmed(Algorithm::Vegas);
    let mut i = 0u64;
    crit.bench_function("on_sample", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            c.on_sample(now, black_box((80 + i % 40) * MS), black_box(30));
        })
    });
}

/// A sample each to 1 000 warmed controllers in turn, as the agent sees 10 000 samples/s
/// over 1 000 destinations: the controller a sample goes to is out of the cache, so this is
/// what the lines a sample touches cost.
fn per_sample_spread(crit: &mut Criterion) {
    let (c, now) = warmed(Algorithm::Vegas);
    let mut many = vec![c; 1_000];
    let mut i = 0usize;
    crit.bench_function("on_sample (1 000 destinations in turn)", |b| {
        b.iter(|| {
            // A stride coprime with 1 000 visits them all in an order the prefetcher cannot follow.
            i = (i + 617) % many.len();
            many[i].on_sample(now, black_box((80 + i as u64 % 40) * MS), black_box(30));
        })
    });
}

fn per_update(crit: &mut Criterion) {
    let (mut c, now) = warmed(Algorithm::Vegas);
    crit.bench_function("update (window open)", |b| {
        b.iter(|| black_box(c.update(black_box(now))))
    });
    for algorithm in Algorithm::ALL {
        let (mut due, now) = warmed(algorithm);
        for i in 0..200 {
            due.on_sample(now, (80 + i % 40) * MS, 30);
        }
        let close_at = now + 2_000 * MS;
        crit.bench_function(&format!("update (window closes, {algorithm})"), |b| {
            b.iter_batched_ref(
                || due.clone(),
                |c| black_box(c.update(close_at)),
                BatchSize::SmallInput,
            )
        });
    }
}

criterion_group!(benches, per_sample, per_sample_spread, per_update);
criterion_main!(benches);
