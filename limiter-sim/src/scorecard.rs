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
pub const EXPECTED_FAILURES: &[ExpectedFailure] = &[];

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
    let text = fs::read_to_string(&page).with_context(|| format!("reading {}", page.display()))?;
    let (Some(start), Some(end)) = (text.find(START), text.find(END)) else {
        bail!("{} has no {START} ... {END} section", page.display());
    };
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
    let section = render(&cells);
    let updated = format!("{}{START}\n{section}{}", &text[..start], &text[end..]);
    fs::write(&page, updated).with_context(|| format!("writing {}", page.display()))
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
            .unwrap_or("not expected: a regression to investigate");
        let _ = writeln!(
            md,
            "- {} x {}: {}. {reason}",
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
