//! `limiter-user simulate`: run one scenario, print its verdict, optionally draw it.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::builder::PossibleValuesParser;

use limiter_core::Algorithm;

use crate::algorithm::AlgorithmChoice;
use crate::report::Report;
use crate::scenarios;

/// The seed used unless one is given: the scorecard and the tests use it too.
pub const DEFAULT_SEED: u64 = 1;

/// Run a simulated scenario against a control algorithm.
#[derive(Clone, Debug, clap::Args)]
pub struct SimulateArgs {
    /// List the scenarios and what each must show.
    #[arg(long, conflicts_with_all = ["scenario", "json", "svg"])]
    pub list: bool,
    /// The scenario to run (see --list).
    #[arg(
        long,
        value_name = "NAME",
        required_unless_present = "list",
        value_parser = PossibleValuesParser::new(scenarios::ALL.iter().map(|s| s.name)),
    )]
    pub scenario: Option<String>,
    #[arg(
        long,
        value_name = "A",
        default_value_t = AlgorithmChoice::default(),
        help = format!(
            "A built-in algorithm ({}), or external:CMD: an algorithm in another process, \
             speaking the line protocol of docs/simulation.md",
            Algorithm::names()
        ),
    )]
    pub algorithm: AlgorithmChoice,
    /// Seed of the run: the same seed gives the same run.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Print the verdict as JSON: {scenario, algorithm, seed, criteria: [{name, value, bound, pass}]}.
    #[arg(long)]
    pub json: bool,
    /// Also draw limit, in-flight, latency and sheds over time into this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// Runs what `args` ask for and prints it to stdout; true when every criterion passed.
pub fn run(args: &SimulateArgs) -> anyhow::Result<bool> {
    run_to(args, &mut std::io::stdout().lock())
}

/// [`run`], printing to `out`.
pub fn run_to(args: &SimulateArgs, out: &mut impl Write) -> anyhow::Result<bool> {
    if args.list {
        let width = scenarios::ALL
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(0);
        for s in scenarios::ALL {
            writeln!(out, "{:width$}  {}", s.name, s.shows)?;
        }
        return Ok(true);
    }
    let name = args
        .scenario
        .as_deref()
        .context("--scenario NAME or --list is needed")?;
    let scenario = scenarios::find(name).with_context(|| format!("no scenario {name:?}"))?;
    let played = scenario.play(&args.algorithm, args.seed)?;
    if let Some(path) = &args.svg {
        let title = format!("{name}: {}, seed {}", args.algorithm, args.seed);
        crate::plot::draw(path, &title, &played.traces)
            .with_context(|| format!("drawing {}", path.display()))?;
    }
    let report = Report {
        scenario: scenario.name,
        algorithm: args.algorithm.to_string(),
        seed: args.seed,
        criteria: &played.criteria,
    };
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{report}")?;
    }
    Ok(report.passed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        simulate: SimulateArgs,
    }

    fn parse(args: &[&str]) -> Result<SimulateArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("simulate").chain(args.iter().copied()))
            .map(|c| c.simulate)
    }

    #[test]
    fn defaults_and_validation() {
        let args = parse(&["--scenario", "converge"]).expect("valid");
        assert_eq!(args.algorithm, AlgorithmChoice::default());
        assert_eq!(args.seed, DEFAULT_SEED);
        assert!(parse(&[]).is_err(), "a scenario or --list is required");
        assert!(parse(&["--scenario", "nope"]).is_err());
        assert!(parse(&["--list", "--scenario", "converge"]).is_err());
        assert!(parse(&["--scenario", "converge", "--algorithm", "magic"]).is_err());
        let external = parse(&["--scenario", "errors", "--algorithm", "external:./a b"])
            .expect("external commands");
        assert_eq!(
            external.algorithm,
            AlgorithmChoice::External("./a b".into())
        );
    }

    #[test]
    fn list_names_every_scenario() {
        let mut out = Vec::new();
        assert!(run_to(&parse(&["--list"]).expect("valid"), &mut out).expect("runs"));
        let text = String::from_utf8(out).expect("utf-8");
        for s in scenarios::ALL {
            assert!(text.contains(s.name), "{text}");
        }
    }
}
