//! A shape's text form, for the command line and for the scorecard's lists:
//!
//! ```text
//! workers=32,service=30ms,sigma=0.3,incident=x27,clients=closed:100,think=250ms,retry=250ms,timeout=2s
//! cores=8,service=4ms,sigma=1.2,incident=x3+half,clients=open:900/s,pool=16,timeout=500ms
//! ```
//!
//! Keys may come in any order and any may be left out: a missing one is the real-traffic
//! rig's ([`Shape::default`]). Printing gives every key in the order above, so a printed
//! shape parses back to itself.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::{ClientShape, Demand, Incident, Servers, Shape, UpstreamShape};

/// The rig's clients think this long after an answer, and after a refusal (a 502).
const RIG_THINK: Duration = Duration::from_millis(250);

impl Default for Shape {
    /// The real-traffic rig: 32 workers of 30 ms, 27 times slower in the incident, 100
    /// clients thinking 250 ms, behind a proxy that gives up after 2 s.
    fn default() -> Self {
        Shape {
            upstream: UpstreamShape {
                servers: Servers::Workers(32),
                service: Duration::from_millis(30),
                sigma: 0.3,
            },
            incident: Incident {
                slower: 27.0,
                halved: false,
                permanent: false,
            },
            clients: ClientShape {
                demand: Demand::Closed {
                    clients: 100,
                    think: RIG_THINK,
                    retry: RIG_THINK,
                },
                pool: None,
                timeout: Duration::from_secs(2),
            },
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let UpstreamShape {
            servers,
            service,
            sigma,
        } = &self.upstream;
        match servers {
            Servers::Workers(n) => write!(f, "workers={n}")?,
            Servers::Cores(n) => write!(f, "cores={n}")?,
        }
        write!(f, ",service={},sigma={sigma}", Span(*service))?;
        write!(f, ",incident={}", self.incident)?;
        match &self.clients.demand {
            Demand::Closed {
                clients,
                think,
                retry,
            } => write!(
                f,
                ",clients=closed:{clients},think={},retry={}",
                Span(*think),
                Span(*retry)
            )?,
            Demand::Open { per_s } => write!(f, ",clients=open:{per_s}/s")?,
        }
        if let Some(pool) = self.clients.pool {
            write!(f, ",pool={pool}")?;
        }
        write!(f, ",timeout={}", Span(self.clients.timeout))
    }
}

impl fmt::Display for Incident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.slower != 1.0 {
            parts.push(format!("x{}", self.slower));
        }
        if self.halved {
            parts.push("half".into());
        }
        if self.permanent {
            parts.push("permanent".into());
        }
        f.write_str(&parts.join("+"))
    }
}

impl FromStr for Shape {
    type Err = String;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        parse(spec).map_err(|e| format!("shape {spec:?}: {e}"))
    }
}

fn parse(spec: &str) -> Result<Shape, String> {
    let mut shape = Shape::default();
    let (mut think, mut retry) = (None, None);
    let mut seen = Vec::new();
    for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("expected key=value, got {pair:?}"))?;
        if seen.contains(&key) {
            return Err(format!("{key} is given twice"));
        }
        seen.push(key);
        let field = |e: String| format!("{key}: {e}");
        match key {
            "workers" => shape.upstream.servers = Servers::Workers(count(value).map_err(field)?),
            "cores" => shape.upstream.servers = Servers::Cores(count(value).map_err(field)?),
            "service" => shape.upstream.service = positive(value).map_err(field)?,
            "sigma" => shape.upstream.sigma = number(value, 0.0).map_err(field)?,
            "incident" => shape.incident = incident(value).map_err(field)?,
            "clients" => shape.clients.demand = demand(value).map_err(field)?,
            "think" => think = Some(span(value).map_err(field)?),
            "retry" => retry = Some(positive(value).map_err(field)?),
            "pool" => shape.clients.pool = Some(count(value).map_err(field)?),
            "timeout" => shape.clients.timeout = positive(value).map_err(field)?,
            _ => {
                return Err(format!(
                    "unknown key {key:?}: expected workers, cores, service, sigma, incident, \
                     clients, think, retry, pool or timeout"
                ))
            }
        }
    }
    if seen.contains(&"workers") && seen.contains(&"cores") {
        return Err("workers and cores are two kinds of upstream: give one".into());
    }
    match &mut shape.clients.demand {
        Demand::Closed {
            think: t, retry: r, ..
        } => {
            *t = think.unwrap_or(*t);
            *r = retry.unwrap_or(*r);
        }
        Demand::Open { .. } if think.is_some() || retry.is_some() => {
            return Err("think and retry are for closed-loop clients".into());
        }
        Demand::Open { .. } => {}
    }
    Ok(shape)
}

fn incident(value: &str) -> Result<Incident, String> {
    let mut incident = Incident {
        slower: 1.0,
        halved: false,
        permanent: false,
    };
    for part in value.split('+') {
        match part {
            "half" => incident.halved = true,
            "permanent" => incident.permanent = true,
            _ => {
                let factor = part
                    .strip_prefix('x')
                    .ok_or_else(|| format!("expected xFACTOR, half or permanent, got {part:?}"))?;
                incident.slower = number(factor, 1.0)?;
            }
        }
    }
    if incident.slower == 1.0 && !incident.halved {
        return Err("an incident slows the service (xFACTOR), halves the servers, or both".into());
    }
    Ok(incident)
}

fn demand(value: &str) -> Result<Demand, String> {
    if let Some(clients) = value.strip_prefix("closed:") {
        return Ok(Demand::Closed {
            clients: count(clients)?,
            think: RIG_THINK,
            retry: RIG_THINK,
        });
    }
    if let Some(rate) = value.strip_prefix("open:") {
        let per_s = rate
            .strip_suffix("/s")
            .ok_or_else(|| format!("expected a rate such as open:100/s, got {value:?}"))?;
        let per_s = number(per_s, 0.0)?;
        if per_s == 0.0 {
            return Err("the rate must be above 0".into());
        }
        return Ok(Demand::Open { per_s });
    }
    Err(format!(
        "expected closed:CLIENTS or open:RATE/s, got {value:?}"
    ))
}

fn count(value: &str) -> Result<u32, String> {
    match value.parse() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("expected a whole number, got {value:?}")),
    }
}

/// A finite number at least `least`.
fn number(value: &str, least: f64) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= least => Ok(x),
        Ok(_) => Err(format!("must be at least {least}, got {value}")),
        Err(_) => Err(format!("expected a number, got {value:?}")),
    }
}

fn positive(value: &str) -> Result<Duration, String> {
    let d = span(value)?;
    if d.is_zero() {
        return Err("must be above 0".into());
    }
    Ok(d)
}

/// A duration such as `250ms`, `1.5s` or `800us`, to the microsecond.
fn span(value: &str) -> Result<Duration, String> {
    let (number_part, per_s) = [("us", 1e6), ("ms", 1e3), ("s", 1.0)]
        .into_iter()
        .find_map(|(unit, per_s)| value.strip_suffix(unit).map(|n| (n, per_s)))
        .ok_or_else(|| format!("expected a duration such as 250ms, 2s or 800us, got {value:?}"))?;
    let n = number(number_part, 0.0)?;
    Ok(Duration::from_micros((n / per_s * 1e6).round() as u64))
}

/// A duration printed in the largest unit that leaves a whole number of units, or failing
/// that the largest under it, to the microsecond: what [`span`] reads back exactly.
struct Span(Duration);

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0.as_micros() as f64;
        if us >= 1e6 {
            write!(f, "{}s", us / 1e6)
        } else if us >= 1e3 {
            write!(f, "{}ms", us / 1e3)
        } else {
            write!(f, "{us}us")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_printed_shape_parses_back_to_itself() {
        for spec in [
            "workers=32,service=30ms,sigma=0.3,incident=x27,clients=closed:100,think=250ms,retry=250ms,timeout=2s",
            "cores=8,service=1.2ms,sigma=1.5,incident=x3+half,clients=open:950/s,pool=16,timeout=500ms",
            "workers=2,service=850us,sigma=0,incident=half+permanent,clients=closed:5,think=0us,retry=1ms,timeout=1.5s",
        ] {
            let shape: Shape = spec.parse().expect("valid");
            assert_eq!(shape.to_string(), spec);
        }
    }

    #[test]
    fn missing_keys_are_the_rigs() {
        let shape: Shape = "workers=8".parse().expect("valid");
        assert_eq!(shape.upstream.servers, Servers::Workers(8));
        assert_eq!(shape.incident, Shape::default().incident);
        assert_eq!(shape.clients, Shape::default().clients);
        let open: Shape = "clients=open:20/s".parse().expect("valid");
        assert_eq!(open.clients.demand, Demand::Open { per_s: 20.0 });
    }

    #[test]
    fn think_and_retry_apply_in_any_order() {
        let shape: Shape = "think=0us,clients=closed:7".parse().expect("valid");
        assert_eq!(
            shape.clients.demand,
            Demand::Closed {
                clients: 7,
                think: Duration::ZERO,
                retry: Duration::from_millis(250)
            }
        );
    }

    #[test]
    fn errors_say_what_is_wrong_in_one_line() {
        for (spec, says) in [
            ("workers=many", "workers: expected a whole number"),
            ("workers=0", "at least 1"),
            ("service=30", "expected a duration"),
            ("retry=0ms", "retry: must be above 0"),
            ("incident=x0.5", "at least 1"),
            ("incident=x1", "an incident slows"),
            ("clients=open:20", "open:100/s"),
            ("clients=open:20/s,think=1s", "closed-loop"),
            ("workers=4,cores=4", "give one"),
            ("sigma=0.3,sigma=0.4", "twice"),
            ("colour=red", "unknown key"),
        ] {
            let err = spec.parse::<Shape>().expect_err(spec);
            assert!(err.contains(says) && !err.contains('\n'), "{spec}: {err}");
        }
    }
}
