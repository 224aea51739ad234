//! A sweep: N shapes drawn from a seed, each played and judged, and its scorecard: per
//! family, how many shapes each criterion judged and how many passed, and the worst shapes
//! with their figures and the spec to play each again.

use std::fmt::Write as _;
use std::path::Path;

use limiter_core::Algorithm;
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use serde::Serialize;

use super::judge::{play, CRITERIA};
use super::{Family, Shape};
use crate::algorithm::AlgorithmChoice;
use crate::criteria::{figure, Criterion};
use crate::scorecard::rewrite_section;
use crate::sweep::in_parallel;

/// Worst shapes listed per family.
const WORST: usize = 3;

/// The first `count` shapes drawn from `seed`.
pub fn shapes(seed: u64, count: u64) -> Vec<Shape> {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    (0..count).map(|_| Shape::random(&mut rng)).collect()
}

/// One shape of a sweep, as played.
#[derive(Serialize)]
pub struct Judged {
    /// The seed it was played at: its place in the sweep, from 1.
    pub seed: u64,
    pub spec: String,
    pub families: Vec<Family>,
    pub criteria: Vec<Criterion>,
    pub figures: String,
}

impl Judged {
    pub fn passed(&self) -> bool {
        self.criteria.iter().all(|c| c.pass)
    }

    fn failed(&self) -> impl Iterator<Item = &Criterion> {
        self.criteria.iter().filter(|c| !c.pass)
    }

    /// Worse first: more criteria failed, then by more.
    fn badness(&self) -> (usize, f64) {
        let shortfall = self.failed().map(|c| c.bound.shortfall(c.value)).sum();
        (self.failed().count(), shortfall)
    }
}

pub struct Scorecard {
    pub algorithm: String,
    pub seed: u64,
    pub judged: Vec<Judged>,
}

/// Plays the first `count` shapes drawn from `seed` with `algorithm`, shape i at seed i.
pub fn sweep(count: u64, seed: u64, algorithm: &AlgorithmChoice) -> anyhow::Result<Scorecard> {
    let jobs: Vec<(u64, Shape)> = (1..).zip(shapes(seed, count)).collect();
    let judged = in_parallel(&jobs, |(index, shape)| {
        let played = play(shape, algorithm, *index)?;
        Ok(Judged {
            seed: *index,
            spec: shape.to_string(),
            families: shape.families(),
            criteria: played.criteria,
            figures: played.figures,
        })
    })?;
    Ok(Scorecard {
        algorithm: algorithm.to_string(),
        seed,
        judged,
    })
}

/// One family's row.
#[derive(Serialize)]
pub struct FamilyCard<'a> {
    pub family: Family,
    pub rule: &'static str,
    pub shapes: usize,
    pub passed: usize,
    pub criteria: Vec<CriterionCount>,
    pub worst: Vec<&'a Judged>,
}

#[derive(Serialize)]
pub struct CriterionCount {
    pub name: &'static str,
    pub judged: usize,
    pub passed: usize,
}

#[derive(Serialize)]
struct Json<'a> {
    algorithm: &'a str,
    seed: u64,
    shapes: usize,
    passed: usize,
    families: Vec<FamilyCard<'a>>,
    judged: &'a [Judged],
}

impl Scorecard {
    pub fn passed(&self) -> usize {
        self.judged.iter().filter(|j| j.passed()).count()
    }

    /// Every family with at least one shape.
    pub fn families(&self) -> Vec<FamilyCard<'_>> {
        Family::ALL
            .into_iter()
            .filter_map(|family| {
                let members: Vec<&Judged> = self
                    .judged
                    .iter()
                    .filter(|j| j.families.contains(&family))
                    .collect();
                (!members.is_empty()).then(|| card(family, &members))
            })
            .collect()
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(Json {
            algorithm: &self.algorithm,
            seed: self.seed,
            shapes: self.judged.len(),
            passed: self.passed(),
            families: self.families(),
            judged: &self.judged,
        })
        .expect("a scorecard serialises")
    }

    /// The scorecard as markdown: a table of families by criteria, then the worst shapes.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let cards = self.families();
        let _ = writeln!(
            md,
            "{} shapes drawn from seed {} with {}: {} pass every criterion. A cell is shapes \
             passed / shapes judged.\n",
            self.judged.len(),
            self.seed,
            self.algorithm,
            self.passed()
        );
        md.push_str("| family | shapes | all pass |");
        for column in &CRITERIA {
            let _ = write!(md, " {} |", column.short);
        }
        md.push_str("\n|---|---|---|");
        md.push_str(&"---|".repeat(CRITERIA.len()));
        md.push('\n');
        for card in &cards {
            let _ = write!(
                md,
                "| {} | {} | {} |",
                card.family.name(),
                card.shapes,
                share(card.passed, card.shapes)
            );
            for count in &card.criteria {
                if count.judged == 0 {
                    md.push_str(" - |");
                } else {
                    let _ = write!(md, " {}/{} |", count.passed, count.judged);
                }
            }
            md.push('\n');
        }
        md.push_str("\nThe worst shapes of each family, by number in the sweep:\n\n");
        md.push_str("| family | worst |\n|---|---|\n");
        let mut listed: Vec<&Judged> = Vec::new();
        for card in cards.iter().filter(|c| !c.worst.is_empty()) {
            let numbers: Vec<String> = card.worst.iter().map(|j| format!("#{}", j.seed)).collect();
            let _ = writeln!(md, "| {} | {} |", card.family.name(), numbers.join(", "));
            for judged in &card.worst {
                if !listed.iter().any(|l| l.seed == judged.seed) {
                    listed.push(judged);
                }
            }
        }
        listed.sort_by_key(|j| j.seed);
        md.push_str(
            "\nThose shapes, each with what it failed and its figures (`limiter-user simulate \
             --shape SPEC --seed N` plays shape #N again):\n\n",
        );
        for judged in listed {
            let failed: Vec<String> = judged
                .failed()
                .map(|c| format!("{} {} (bound {})", c.name, figure(c.value), c.bound))
                .collect();
            let _ = writeln!(
                md,
                "- #{} `{}`: {}; {}",
                judged.seed,
                judged.spec,
                failed.join(", "),
                judged.figures
            );
        }
        md
    }
}

const START: &str = "<!-- shapes:start -->";
const END: &str = "<!-- shapes:end -->";
const FAMILIES_START: &str = "<!-- families:start -->";
const FAMILIES_END: &str = "<!-- families:end -->";

/// Sweeps `count` shapes from `seed` with every built-in algorithm and rewrites the parts of
/// `docs_dir/simulation.md` between the families markers (each family's rule) and between
/// the shapes markers: the algorithms side by side, then the default algorithm's scorecard.
pub fn write_docs(docs_dir: &Path, count: u64, seed: u64) -> anyhow::Result<()> {
    let page = docs_dir.join("simulation.md");
    let mut rules = String::from("| family | rule |\n|---|---|\n");
    for family in Family::ALL {
        let _ = writeln!(rules, "| {} | {} |", family.name(), family.rule());
    }
    rewrite_section(&page, (FAMILIES_START, FAMILIES_END), &rules)?;
    let scorecards = Algorithm::ALL
        .into_iter()
        .map(|algorithm| sweep(count, seed, &AlgorithmChoice::Builtin(algorithm)))
        .collect::<anyhow::Result<Vec<Scorecard>>>()?;
    let mut md = format!(
        "`cargo run --release -p limiter-sim --example shapes -- {count} {seed}` regenerates \
         this section: {count} shapes drawn from seed {seed}, played with every built-in \
         algorithm.\n\nShapes passing every criterion, per family:\n\n"
    );
    md.push_str("| family | shapes |");
    for scorecard in &scorecards {
        let _ = write!(md, " {} |", scorecard.algorithm);
    }
    md.push_str("\n|---|---|");
    md.push_str(&"---|".repeat(scorecards.len()));
    md.push('\n');
    let cards: Vec<Vec<FamilyCard<'_>>> = scorecards.iter().map(Scorecard::families).collect();
    for (row, card) in cards[0].iter().enumerate() {
        let _ = write!(md, "| {} | {} |", card.family.name(), card.shapes);
        for column in &cards {
            let _ = write!(md, " {} |", share(column[row].passed, column[row].shapes));
        }
        md.push('\n');
    }
    md.push_str("\nEach criterion over every shape it judges (passed / judged):\n\n| criterion |");
    for scorecard in &scorecards {
        let _ = write!(md, " {} |", scorecard.algorithm);
    }
    md.push_str("\n|---|");
    md.push_str(&"---|".repeat(scorecards.len()));
    md.push('\n');
    for (index, column) in CRITERIA.iter().enumerate() {
        let _ = write!(md, "| {} |", column.name);
        for all in cards.iter().map(|c| &c[0]) {
            let count = &all.criteria[index];
            let _ = write!(md, " {}/{} |", count.passed, count.judged);
        }
        md.push('\n');
    }
    let _ = write!(
        md,
        "\n#### The default algorithm's scorecard\n\n{}",
        scorecards[0].to_markdown()
    );
    rewrite_section(&page, (START, END), &md)
}

fn card<'a>(family: Family, members: &[&'a Judged]) -> FamilyCard<'a> {
    let criteria = CRITERIA
        .iter()
        .map(|column| {
            let judged: Vec<&Criterion> = members
                .iter()
                .flat_map(|j| j.criteria.iter().filter(|c| c.name == column.name))
                .collect();
            CriterionCount {
                name: column.name,
                judged: judged.len(),
                passed: judged.iter().filter(|c| c.pass).count(),
            }
        })
        .collect();
    let mut failing: Vec<&Judged> = members.iter().copied().filter(|j| !j.passed()).collect();
    failing.sort_by(|a, b| {
        let (a, b) = (a.badness(), b.badness());
        b.0.cmp(&a.0).then(b.1.total_cmp(&a.1))
    });
    failing.truncate(WORST);
    FamilyCard {
        family,
        rule: family.rule(),
        shapes: members.len(),
        passed: members.iter().filter(|j| j.passed()).count(),
        criteria,
        worst: failing,
    }
}

fn share(part: usize, whole: usize) -> String {
    format!(
        "{part} ({:.0} %)",
        100.0 * part as f64 / whole.max(1) as f64
    )
}
