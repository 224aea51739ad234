//! Many seeds of many scenarios, spread over the machine's cores: what the robustness test
//! and the `seeds` example run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::algorithm::AlgorithmChoice;
use crate::criteria::figure;
use crate::scenarios::Scenario;

/// One scenario and seed that failed, with the criteria that did.
#[derive(Clone, Debug)]
pub struct SeedFailure {
    pub scenario: &'static str,
    pub seed: u64,
    pub failed: Vec<String>,
}

/// Plays every scenario of `scenarios` at every seed of `seeds` and returns the failures,
/// ordered by scenario and seed.
pub fn sweep(
    scenarios: &[&'static Scenario],
    algorithm: &AlgorithmChoice,
    seeds: std::ops::RangeInclusive<u64>,
) -> anyhow::Result<Vec<SeedFailure>> {
    let jobs: Vec<(&'static Scenario, u64)> = scenarios
        .iter()
        .flat_map(|s| seeds.clone().map(move |seed| (*s, seed)))
        .collect();
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    while let Some(&(scenario, seed)) =
                        jobs.get(next.fetch_add(1, Ordering::Relaxed))
                    {
                        let played = scenario.play(algorithm, seed)?;
                        let failed: Vec<String> = played
                            .criteria
                            .iter()
                            .filter(|c| !c.pass)
                            .map(|c| {
                                format!("{} = {} (bound {})", c.name, figure(c.value), c.bound)
                            })
                            .collect();
                        if !failed.is_empty() {
                            failures
                                .lock()
                                .expect("no worker panicked")
                                .push(SeedFailure {
                                    scenario: scenario.name,
                                    seed,
                                    failed,
                                });
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a sweep worker panicked")?;
        }
        Ok(())
    })?;
    let mut failures = failures.into_inner().expect("no worker panicked");
    failures.sort_by_key(|f| (f.scenario, f.seed));
    Ok(failures)
}
