//! `limiter-user simulate`: run one scenario or shape, print its verdict, optionally draw
//! it; or sweep many shapes and print their scorecard per family.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::builder::PossibleValuesParser;

use limiter_core::Algorithm;

use crate::algorithm::AlgorithmChoice;
use crate::report::{Report, Subject};
use crate::scenarios;
use crate::shapes::{self, Shape};

/// The seed used unless one is given: the scorecard and the tests use it too.
pub const DEFAULT_SEED: u64 = 1;

/// Run a simulated scenario or shape against a control algorithm.
#[derive(Clone, Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("what").required(true))]
pub struct SimulateArgs {
    /// List the scenarios and what each must show.
    #[arg(long, group = "what", conflicts_with_all = ["json", "svg"])]
    pub list: bool,
    /// The scenario to run (see --list).
    #[arg(
        long,
        value_name = "NAME",
        group = "what",
        value_parser = PossibleValuesParser::new(scenarios::ALL.iter().map(|s| s.name)),
    )]
    pub scenario: Option<String>,
    /// A shape to run, judged against its twin with no limiter: key=value pairs such as
    /// workers=8,service=600ms,sigma=0,incident=x40,clients=closed:100,think=50ms,timeout=2s
    /// (docs/simulation.md, "Shapes"; a key left out is the real-traffic rig's).
    #[arg(long, value_name = "SPEC", group = "what")]
    pub shape: Option<Shape>,
    /// Draw N shapes from --seed, play shape i at seed i, and print the scorecard per
    /// family with the worst shapes.
    #[arg(long, value_name = "N", group = "what", conflicts_with = "svg")]
    pub sweep: Option<u64>,
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
    /// Seed of the run (of the shapes drawn, with --sweep): the same seed gives the same run.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Print the verdict as JSON: {scenario, algorithm, seed, criteria: [{name, value, bound,
    /// pass}]}, with shape: {spec, families, figures} in place of scenario for a shape; a
    /// sweep's scorecard as {algorithm, seed, shapes, passed, families: [...]}.
    #[arg(long)]
    pub json: bool,
    /// Also draw limit, in-flight, latency and sheds over time into this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// Runs what `args` ask for and prints it to stdout; true when every criterion passed (of
/// every shape, for a sweep).
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
    if let Some(count) = args.sweep {
        let scorecard = shapes::sweep(count, args.seed, &args.algorithm)?;
        if args.json {
            serde_json::to_writer_pretty(&mut *out, &scorecard.to_json())?;
            writeln!(out)?;
        } else {
            write!(out, "{}", scorecard.to_markdown())?;
        }
        return Ok(scorecard.passed() == scorecard.judged.len());
    }
    let (subject, criteria, traces) = if let Some(shape) = &args.shape {
        let played = shapes::play(shape, &args.algorithm, args.seed)?;
        let subject = Subject::Shape {
            spec: shape.to_string(),
            families: shape.families(),
            figures: played.figures,
        };
        (subject, played.criteria, played.traces)
    } else {
        let name = args
            .scenario
            .as_deref()
            .context("--scenario NAME, --shape SPEC, --sweep N or --list is needed")?;
        let scenario = scenarios::find(name).with_context(|| format!("no scenario {name:?}"))?;
        let played = scenario.play(&args.algorithm, args.seed)?;
        (
            Subject::Scenario(scenario.name),
            played.criteria,
            played.traces,
        )
    };
    if let Some(path) = &args.svg {
        let name = match &subject {
            Subject::Scenario(name) => name.to_string(),
            Subject::Shape { spec, .. } => spec.clone(),
        };
        let title = format!("{name}: {}, seed {}", args.algorithm, args.seed);
        crate::plot::draw(path, &title, &traces)
            .with_context(|| format!("drawing {}", path.display()))?;
    }
    let report = Report {
        subject,
        algorithm: args.algorithm.to_string(),
        seed: args.seed,
        criteria: &criteria,
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
        assert!(parse(&["--shape", "workers=8", "--scenario", "converge"]).is_err());
        assert!(parse(&["--sweep", "5", "--svg", "x.svg"]).is_err());
        let shape = parse(&["--shape", "workers=8,incident=half"]).expect("a shape");
        assert_eq!(
            shape.shape.map(|s| s.to_string()),
            Some("workers=8,service=30ms,sigma=0.3,incident=half,clients=closed:100,think=250ms,retry=250ms,timeout=2s".into())
        );
        let err = parse(&["--shape", "workers=many"]).expect_err("not a count");
        assert!(err.to_string().contains("expected a whole number"), "{err}");
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
