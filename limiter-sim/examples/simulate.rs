//! The `simulate` subcommand on its own:
//! `cargo run --release -p limiter-sim --example simulate -- --scenario converge`.

use clap::Parser;
use limiter_sim::SimulateArgs;

#[derive(Parser)]
#[command(name = "simulate")]
struct Cli {
    #[command(flatten)]
    args: SimulateArgs,
}

fn main() -> anyhow::Result<()> {
    let passed = limiter_sim::run(&Cli::parse().args)?;
    std::process::exit(if passed { 0 } else { 1 });
}
