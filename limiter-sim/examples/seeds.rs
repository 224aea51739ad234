//! Plays scenarios over a range of seeds with the default algorithm and lists the failures:
//! `cargo run --release -p limiter-sim --example seeds -- FIRST LAST [SCENARIO...]`.

use limiter_sim::{scenarios, sweep, AlgorithmChoice};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seed = |i: usize, default: u64| args.get(i).map_or(Ok(default), |a| a.parse());
    let (first, last) = (seed(0, 1)?, seed(1, 200)?);
    let chosen: Vec<_> = if args.len() > 2 {
        args[2..]
            .iter()
            .map(|n| scenarios::find(n).ok_or_else(|| anyhow::anyhow!("no scenario {n}")))
            .collect::<anyhow::Result<_>>()?
    } else {
        scenarios::ALL.iter().collect()
    };
    let failures = sweep(&chosen, &AlgorithmChoice::default(), first..=last)?;
    for f in &failures {
        println!("{} seed {}: {}", f.scenario, f.seed, f.failed.join("; "));
    }
    println!("{} failures over seeds {first}..={last}", failures.len());
    Ok(())
}
