//! Regenerates the simulation scorecard and pictures in docs/:
//! `cargo run --release -p limiter-sim --example scorecard [DOCS_DIR]`.

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let docs = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs"),
        PathBuf::from,
    );
    limiter_sim::scorecard(&docs)
}
