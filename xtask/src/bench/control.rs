//! The control crate's criterion benchmark: nanoseconds per sample and per update.

use std::process::Stdio;

use anyhow::{ensure, Context, Result};

pub struct Figure {
    pub name: String,
    pub ns: f64,
}

pub fn run() -> Result<Vec<Figure>> {
    let mut cmd = crate::cargo(&[
        "bench",
        "--package",
        "limiter-core",
        "--bench",
        "controller",
        "--",
        "--output-format",
        "bencher",
    ]);
    let out = cmd
        .current_dir(crate::workspace_root())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    ensure!(out.status.success(), "{cmd:?} failed ({})", out.status);
    let figures = parse(&String::from_utf8_lossy(&out.stdout));
    ensure!(
        !figures.is_empty(),
        "the control crate's benchmark reported nothing"
    );
    Ok(figures)
}

/// Lines of criterion's bencher format: `test NAME ... bench: 1,234 ns/iter (+/- 5)`.
fn parse(stdout: &str) -> Vec<Figure> {
    stdout
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("test ")?.split_once(" ... bench:")?;
            let ns = rest
                .split_whitespace()
                .next()?
                .replace(',', "")
                .parse()
                .ok()?;
            Some(Figure {
                name: name.trim().to_string(),
                ns,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bencher_lines_give_names_and_nanoseconds() {
        let out = "\ntest on_sample ... bench:          12 ns/iter (+/- 0)\n\
                   test update (window closes, vegas) ... bench:       1,534 ns/iter (+/- 21)\n\
                   Gnuplot not found\n";
        let f = parse(out);
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].name.as_str(), f[0].ns), ("on_sample", 12.0));
        assert_eq!(
            (f[1].name.as_str(), f[1].ns),
            ("update (window closes, vegas)", 1534.0)
        );
    }
}
