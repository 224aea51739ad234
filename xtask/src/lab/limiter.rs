//! The limiter under test: none, the agent in prod (refusing or queueing at the limit), or
//! the agent in shadow.

use std::net::SocketAddrV4;

use anyhow::Result;
use limiter_integration_tests::{Agent, TestCgroup};

use super::sampler::Sampler;
use crate::bench::binaries::Binaries;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Limiter {
    None,
    Prod,
    /// Prod with `overflow = "queue"`.
    Queue,
    Shadow,
}

impl Limiter {
    /// The kinds among `runs`, each once, in the order they first come.
    pub fn kinds(runs: impl IntoIterator<Item = Limiter>) -> Vec<Limiter> {
        let mut kinds = Vec::new();
        for run in runs {
            if !kinds.contains(&run) {
                kinds.push(run);
            }
        }
        kinds
    }

    pub fn label(self) -> &'static str {
        match self {
            Limiter::None => "no limiter",
            Limiter::Prod => "limiter in prod",
            Limiter::Queue => "limiter in prod, queueing",
            Limiter::Shadow => "limiter in shadow",
        }
    }

    /// Starts the agent on `cgroup`, with its defaults but for the mode (nothing for no
    /// limiter) and logging its windows, and a sampler of `destination` that reads it.
    pub fn attach<'a>(
        self,
        bins: &'a Binaries,
        cgroup: &'a TestCgroup,
        destination: SocketAddrV4,
    ) -> Result<(Option<Agent>, Sampler<'a>)> {
        let args: &[&str] = match self {
            Limiter::None => &[],
            Limiter::Prod => &["--mode", "prod"],
            Limiter::Queue => &["--mode", "prod", "--overflow", "queue"],
            Limiter::Shadow => &["--mode", "shadow"],
        };
        let agent = (self != Limiter::None)
            .then(|| bins.agent.start_logging_windows(cgroup, args))
            .transpose()?;
        let sampler = Sampler {
            agent: agent.as_ref().map(|_| (&bins.agent, cgroup)),
            destination,
            held_by: None,
        };
        Ok((agent, sampler))
    }
}

/// The windows the agent logged for `destination`, one JSON object per line; none without
/// an agent.
pub fn logged_windows(agent: Option<&Agent>, destination: SocketAddrV4) -> String {
    agent
        .map(|agent| agent.windows(destination.into()))
        .unwrap_or_default()
        .iter()
        .map(|w| format!("{w}\n"))
        .collect()
}
