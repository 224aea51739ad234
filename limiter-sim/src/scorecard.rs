//! The scorecard: every scenario against every built-in algorithm, with pictures,
//! written into the documentation.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{bail, Context};
use limiter_core::Algorithm;

use crate::algorithm::{AlgorithmChoice, DEFAULT_ALGORITHM};
use crate::cli::DEFAULT_SEED;
use crate::criteria::Criterion;
use crate::plot;
use crate::scenarios::{self, Scenario};

/// A scenario a non-default algorithm is known to fail, and why.
pub struct ExpectedFailure {
    pub scenario: &'static str,
    pub algorithm: Algorithm,
    pub reason: &'static str,
}

/// The failures the scorecard shows and the test suite expects (default seed).
pub const EXPECTED_FAILURES: &[ExpectedFailure] = &[
    ExpectedFailure {
        scenario: "converge",
        algorithm: Algorithm::Gradient2,
        reason: "tolerance 1.5 accepts a p90 up to 1.5x the baseline, which on this upstream means about 65 requests queued beyond C: the limit settles near 170 and swings by 30 %.",
    },
    ExpectedFailure {
        scenario: "capacity-halves",
        algorithm: Algorithm::Gradient2,
        reason: "tolerance 1.5 lets the same queue build on half the workers (about 87, 1.7x C/2); after they return the baseline heals upward onto that queueing and the limit climbs to the maximum.",
    },
    ExpectedFailure {
        scenario: "converge",
        algorithm: Algorithm::Aimd,
        reason: "error-driven by design: blind to latency, it climbs one step per window past C and is still climbing when the run ends.",
    },
    ExpectedFailure {
        scenario: "capacity-halves",
        algorithm: Algorithm::Aimd,
        reason: "error-driven by design: no errors, so it keeps climbing through the halving, to the maximum.",
    },
    ExpectedFailure {
        scenario: "low-traffic",
        algorithm: Algorithm::Aimd,
        reason: "error-driven by design: a 5x slowdown without errors does not move it.",
    },
    ExpectedFailure {
        scenario: "baseline-shift",
        algorithm: Algorithm::Aimd,
        reason: "error-driven by design: blind to latency, it climbs to the maximum.",
    },
    ExpectedFailure {
        scenario: "errors",
        algorithm: Algorithm::Aimd,
        reason: "falls on the burst (x0.9 per window with errors), then goes back to its limit before it, which its climb blind to latency had taken past C to the maximum.",
    },
    ExpectedFailure {
        scenario: "converge",
        algorithm: Algorithm::Gateway,
        reason: "+sqrt(limit) growth against a 60 s fastest-RTT baseline makes a sawtooth between C and 2C.",
    },
    ExpectedFailure {
        scenario: "capacity-halves",
        algorithm: Algorithm::Gateway,
        reason: "the same sawtooth: above 100 on half the workers and up to the maximum after they return.",
    },
    ExpectedFailure {
        scenario: "baseline-shift",
        algorithm: Algorithm::Gateway,
        reason: "the same sawtooth after the shift, up to 1.6x C.",
    },
    ExpectedFailure {
        scenario: "converge",
        algorithm: Algorithm::Fixed,
        reason: "a static cap of 20 does not adapt to C = 100.",
    },
    ExpectedFailure {
        scenario: "capacity-halves",
        algorithm: Algorithm::Fixed,
        reason: "a static cap of 20 does not adapt to C.",
    },
    ExpectedFailure {
        scenario: "streaming",
        algorithm: Algorithm::Fixed,
        reason: "a static cap of 20 is below the 45 streams the load needs.",
    },
    ExpectedFailure {
        scenario: "low-traffic",
        algorithm: Algorithm::Fixed,
        reason: "a static cap does not fall on a slowdown or on errors.",
    },
    ExpectedFailure {
        scenario: "baseline-shift",
        algorithm: Algorithm::Fixed,
        reason: "a static cap of 20 does not adapt to C = 100.",
    },
    ExpectedFailure {
        scenario: "errors",
        algorithm: Algorithm::Fixed,
        reason: "a static cap neither falls on errors nor reaches C = 100.",
    },
    ExpectedFailure {
        scenario: "incident",
        algorithm: Algorithm::Gradient2,
        reason: "with the 60 s client its tolerance of 1.5x holds in-flight at 70 to 85, 2.2 to 2.7x the workers, and the baseline does not follow the slowdown (the 2 s client's timeouts cut the limit through the workers, and it follows as Vegas does).",
    },
    ExpectedFailure {
        scenario: "incident",
        algorithm: Algorithm::Aimd,
        reason: "error-driven by design: blind to latency, it lets in-flight run to 2-3x the workers, and the 2 s timeouts cut it by 0.9 per window.",
    },
    ExpectedFailure {
        scenario: "incident",
        algorithm: Algorithm::Gateway,
        reason: "its rolling 60 s baseline accepts the slow service time only after a minute; until then it halves (the 60 s client short of the capacity for it), and then overshoots to 3x the workers.",
    },
    ExpectedFailure {
        scenario: "mixed-sizes",
        algorithm: Algorithm::Fixed,
        reason: "a static cap of 20 is below the 24 connections the load needs.",
    },
    ExpectedFailure {
        scenario: "healthy-start",
        algorithm: Algorithm::Fixed,
        reason: "a static cap of 20 refuses the 100 clients' bursts.",
    },
    ExpectedFailure {
        scenario: "incident",
        algorithm: Algorithm::Fixed,
        reason: "a static cap of 20, below the 32 workers, serves 23 requests/s of the 38 they could.",
    },
    ExpectedFailure {
        scenario: "recovery",
        algorithm: Algorithm::Fixed,
        reason: "a static cap of 20 refuses the healthy clients' bursts after the incident as before it.",
    },
    ExpectedFailure {
        scenario: "keepalive-pool",
        algorithm: Algorithm::Fixed,
        reason: "a static cap of 20 is below what the pool grows to for a burst.",
    },
    ExpectedFailure {
        scenario: "overload",
        algorithm: Algorithm::Gradient2,
        reason: "settles at the allowance as Vegas does; once it returns, the ceiling's probes lift it and its tolerance of 1.5x takes the limit past C, as in converge.",
    },
    ExpectedFailure {
        scenario: "overload",
        algorithm: Algorithm::Aimd,
        reason: "settles at the allowance, held by the ceiling; once it returns, blind to latency it climbs past C, as in converge.",
    },
    ExpectedFailure {
        scenario: "overload",
        algorithm: Algorithm::Gateway,
        reason: "settles at the allowance, held by the ceiling; once it returns, the sawtooth between C and 2C of converge.",
    },
    ExpectedFailure {
        scenario: "overload",
        algorithm: Algorithm::Fixed,
        reason: "a static cap of 20 neither reaches the allowance of 60 nor C = 100.",
    },
    ExpectedFailure {
        scenario: "queueing",
        algorithm: Algorithm::Gateway,
        reason: "its limit stays over the 32 workers (in-flight p95 54 in the incident), so admitted connects queue at the upstream and time out there: queueing cuts the errors by 29 % (10 775 against 15 127), not half.",
    },
    ExpectedFailure {
        scenario: "queueing",
        algorithm: Algorithm::Fixed,
        reason: "a limit of 20 under 32 workers serves 25 requests/s, far under the clients' demand: most waiters end at the maximum wait, and queueing cuts the errors by 44 % (8 368 against 14 848), not half.",
    },
];

pub fn expected_failure(scenario: &str, algorithm: Algorithm) -> Option<&'static str> {
    EXPECTED_FAILURES
        .iter()
        .find(|f| f.scenario == scenario && f.algorithm == algorithm)
        .map(|f| f.reason)
}

const START: &str = "<!-- scorecard:start -->";
const END: &str = "<!-- scorecard:end -->";

struct Cell {
    scenario: &'static Scenario,
    algorithm: Algorithm,
    criteria: Vec<Criterion>,
    key_figure: String,
}

impl Cell {
    fn passed(&self) -> bool {
        self.criteria.iter().all(|c| c.pass)
    }

    fn picture(&self) -> String {
        format!("img/sim-{}-{}.svg", self.scenario.name, self.algorithm)
    }
}

/// Plays every scenario with every built-in algorithm at the default seed, draws each
/// run into `docs_dir/img/`, and rewrites the part of `docs_dir/simulation.md` between
/// the scorecard markers.
pub fn scorecard(docs_dir: &Path) -> anyhow::Result<()> {
    let page = docs_dir.join("simulation.md");
    fs::create_dir_all(docs_dir.join("img"))?;
    let cells = std::thread::scope(|scope| {
        let workers: Vec<_> = Algorithm::ALL
            .into_iter()
            .map(|algorithm| scope.spawn(move || play_all(docs_dir, algorithm)))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a scorecard worker panicked"))
            .collect::<anyhow::Result<Vec<Vec<Cell>>>>()
    })?;
    rewrite_section(&page, (START, END), &render(&cells))
}

/// Replaces what lies between the `markers` in the file at `page` with `section`.
pub fn rewrite_section(page: &Path, markers: (&str, &str), section: &str) -> anyhow::Result<()> {
    let (start_marker, end_marker) = markers;
    let text = fs::read_to_string(page).with_context(|| format!("reading {}", page.display()))?;
    let (Some(start), Some(end)) = (text.find(start_marker), text.find(end_marker)) else {
        bail!(
            "{} has no {start_marker} ... {end_marker} section",
            page.display()
        );
    };
    let updated = format!(
        "{}{start_marker}\n{section}{}",
        &text[..start],
        &text[end..]
    );
    fs::write(page, updated).with_context(|| format!("writing {}", page.display()))
}

fn play_all(docs_dir: &Path, algorithm: Algorithm) -> anyhow::Result<Vec<Cell>> {
    scenarios::ALL
        .iter()
        .map(|scenario| {
            let played = scenario.play(&AlgorithmChoice::Builtin(algorithm), DEFAULT_SEED)?;
            let cell = Cell {
                scenario,
                algorithm,
                criteria: played.criteria,
                key_figure: played.key_figure,
            };
            let title = format!("{}: {algorithm}, seed {DEFAULT_SEED}", scenario.name);
            plot::draw(&docs_dir.join(cell.picture()), &title, &played.traces)?;
            Ok(cell)
        })
        .collect()
}

/// `cells[algorithm][scenario]` as markdown: the table, the failures explained, the
/// pictures of the default algorithm.
fn render(cells: &[Vec<Cell>]) -> String {
    let mut md = String::new();
    md.push_str("| scenario |");
    for algorithm in Algorithm::ALL {
        let _ = write!(md, " {algorithm} |");
    }
    md.push_str("\n|---|");
    md.push_str(&"---|".repeat(Algorithm::ALL.len()));
    md.push('\n');
    for (row, scenario) in scenarios::ALL.iter().enumerate() {
        let _ = write!(md, "| {} |", scenario.name);
        for column in cells {
            let cell = &column[row];
            let verdict = match (
                cell.passed(),
                expected_failure(scenario.name, cell.algorithm),
            ) {
                (true, None) => "pass",
                (false, Some(_)) => "fail (expected)",
                (false, None) => "**FAIL**",
                (true, Some(_)) => "**pass (expected to fail)**",
            };
            let _ = write!(
                md,
                " [{verdict}]({}): {} |",
                cell.picture(),
                cell.key_figure
            );
        }
        md.push('\n');
    }
    md.push_str("\nFailures, with the criteria that failed and why:\n\n");
    let failures: Vec<&Cell> = cells.iter().flatten().filter(|c| !c.passed()).collect();
    if failures.is_empty() {
        md.push_str("- none\n");
    }
    for cell in failures {
        let failed: Vec<String> = cell
            .criteria
            .iter()
            .filter(|c| !c.pass)
            .map(|c| {
                format!(
                    "{} = {} (bound {})",
                    c.name,
                    crate::criteria::figure(c.value),
                    c.bound
                )
            })
            .collect();
        let reason = expected_failure(cell.scenario.name, cell.algorithm)
            .unwrap_or("not expected: a regression to investigate.");
        let _ = writeln!(
            md,
            "- {} x {}: {}. Why: {reason}",
            cell.scenario.name,
            cell.algorithm,
            failed.join("; ")
        );
    }
    md.push_str("\nThe default algorithm, scenario by scenario:\n\n");
    let default = cells.iter().find(|column| {
        column
            .first()
            .is_some_and(|c| c.algorithm == DEFAULT_ALGORITHM)
    });
    for cell in default.into_iter().flatten() {
        let _ = writeln!(
            md,
            "#### {}\n\n{}.\n\n![{} with {}]({})\n",
            cell.scenario.name,
            cell.scenario.shows,
            cell.scenario.name,
            cell.algorithm,
            cell.picture()
        );
    }
    md
}
