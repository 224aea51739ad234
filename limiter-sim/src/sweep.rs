//! Many runs spread over the machine's cores: the seeds of many scenarios, which the
//! robustness test and the `seeds` example play, and the shapes of a sweep.

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
    let played = in_parallel(&jobs, |&(scenario, seed)| {
        let played = scenario.play(algorithm, seed)?;
        let failed: Vec<String> = played
            .criteria
            .iter()
            .filter(|c| !c.pass)
            .map(|c| format!("{} = {} (bound {})", c.name, figure(c.value), c.bound))
            .collect();
        Ok((!failed.is_empty()).then_some(SeedFailure {
            scenario: scenario.name,
            seed,
            failed,
        }))
    })?;
    let mut failures: Vec<SeedFailure> = played.into_iter().flatten().collect();
    failures.sort_by_key(|f| (f.scenario, f.seed));
    Ok(failures)
}

/// `work` done on every job, by as many threads as the machine has cores; the results in
/// the order of the jobs, or the first error.
pub fn in_parallel<J: Sync, R: Send>(
    jobs: &[J],
    work: impl Fn(&J) -> anyhow::Result<R> + Sync,
) -> anyhow::Result<Vec<R>> {
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::with_capacity(jobs.len()));
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(job) = jobs.get(index) else {
                            return Ok(());
                        };
                        let result = work(job)?;
                        done.lock()
                            .expect("no worker panicked")
                            .push((index, result));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a worker panicked")?;
        }
        Ok(())
    })?;
    let mut done = done.into_inner().expect("no worker panicked");
    done.sort_by_key(|&(index, _)| index);
    Ok(done.into_iter().map(|(_, result)| result).collect())
}
