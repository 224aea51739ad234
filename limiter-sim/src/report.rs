//! A played scenario as people read it (a table) and as programs read it (JSON).

use std::fmt;

use serde::Serialize;

use crate::criteria::{figure, Criterion};

/// The verdict of one scenario under one algorithm and seed.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    pub scenario: &'a str,
    pub algorithm: String,
    pub seed: u64,
    pub criteria: &'a [Criterion],
}

impl Report<'_> {
    pub fn passed(&self) -> bool {
        self.criteria.iter().all(|c| c.pass)
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.passed() { "pass" } else { "FAIL" };
        writeln!(
            f,
            "{} with {}, seed {}: {verdict}",
            self.scenario, self.algorithm, self.seed
        )?;
        let name_width = self
            .criteria
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(0);
        writeln!(
            f,
            "  {:name_width$}  {:>10}  {:>12}  result",
            "criterion", "value", "bound"
        )?;
        for c in self.criteria {
            let result = if c.pass { "pass" } else { "FAIL" };
            writeln!(
                f,
                "  {:name_width$}  {:>10}  {:>12}  {result}",
                c.name,
                figure(c.value),
                c.bound.to_string()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::criteria::Bound;

    fn report(criteria: &[Criterion]) -> Report<'_> {
        Report {
            scenario: "converge",
            algorithm: "vegas".into(),
            seed: 7,
            criteria,
        }
    }

    #[test]
    fn json_has_the_documented_fields() {
        let criteria = [Criterion::new("median limit", 41.0, Bound::AtMost(48.0))];
        let json = serde_json::to_value(report(&criteria)).expect("serialisable");
        assert_eq!(
            json,
            serde_json::json!({
                "scenario": "converge",
                "algorithm": "vegas",
                "seed": 7,
                "criteria": [{"name": "median limit", "value": 41.0, "bound": "<= 48", "pass": true}],
            })
        );
    }

    #[test]
    fn one_failed_criterion_fails_the_report() {
        let criteria = [
            Criterion::new("a", 1.0, Bound::AtMost(2.0)),
            Criterion::new("b", 3.0, Bound::AtMost(2.0)),
        ];
        let r = report(&criteria);
        assert!(!r.passed());
        let table = r.to_string();
        assert!(
            table.starts_with("converge with vegas, seed 7: FAIL"),
            "{table}"
        );
        assert!(table.contains("b") && table.contains("FAIL"));
    }
}
