//! A played scenario or shape as people read it (a table) and as programs read it (JSON).

use std::fmt;

use serde::Serialize;

use crate::criteria::{figure, Criterion};
use crate::shapes::Family;

/// What was played: `{"scenario": NAME}` or `{"shape": {spec, families, figures}}` in JSON.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Subject<'a> {
    Scenario(&'a str),
    Shape {
        spec: String,
        families: Vec<Family>,
        /// The figures behind the criteria, in a line.
        figures: String,
    },
}

/// The verdict of one scenario or shape under one algorithm and seed.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    #[serde(flatten)]
    pub subject: Subject<'a>,
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
        let name = match &self.subject {
            Subject::Scenario(name) => name.to_string(),
            Subject::Shape { spec, .. } => format!("shape {spec}"),
        };
        writeln!(
            f,
            "{name} with {}, seed {}: {verdict}",
            self.algorithm, self.seed
        )?;
        if let Subject::Shape {
            families, figures, ..
        } = &self.subject
        {
            let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
            writeln!(
                f,
                "  families: {}
  {figures}",
                names.join(", ")
            )?;
        }
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
            subject: Subject::Scenario("converge"),
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

    #[test]
    fn a_shape_is_reported_with_its_spec_families_and_figures() {
        let criteria = [Criterion::new("healthy: refused", 0.0, Bound::AtMost(0.0))];
        let r = Report {
            subject: Subject::Shape {
                spec: "workers=8".into(),
                families: vec![Family::All, Family::FewWorkers],
                figures: "demand 2".into(),
            },
            algorithm: "vegas".into(),
            seed: 3,
            criteria: &criteria,
        };
        let json = serde_json::to_value(&r).expect("serialisable");
        assert_eq!(
            json["shape"],
            serde_json::json!({"spec": "workers=8", "families": ["all", "few-workers"], "figures": "demand 2"})
        );
        let table = r.to_string();
        assert!(table.starts_with("shape workers=8 with vegas, seed 3: pass\n  families: all, few-workers\n  demand 2\n"), "{table}");
    }
}
