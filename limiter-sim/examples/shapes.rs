//! Sweeps shapes with every built-in algorithm and writes their scorecards into
//! docs/simulation.md: `cargo run --release -p limiter-sim --example shapes [-- COUNT SEED]`
//! (1 000 shapes from seed 1 unless told).

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: u64| args.get(i).map_or(Ok(default), |a| a.parse());
    let (count, seed) = (number(0, 1_000)?, number(1, 1)?);
    let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs");
    limiter_sim::shapes::write_docs(&docs, count, seed)
}
