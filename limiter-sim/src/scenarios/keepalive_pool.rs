//! A proxy's keep-alive pool to a healthy upstream: steady traffic over pooled
//! connections, and every 5 s a burst of 40 requests at once for which the pool opens new
//! connections (keeping 32 idle afterwards). In-flight counts connections, idle or not;
//! a limit below what the pool grows to refuses healthy traffic.

use super::{phase, Judgement, Run, Scenario};
use crate::clients::{Client, Load, RequestClass, Service};
use crate::criteria::{Bound, Criterion};
use crate::engine::Setup;
use crate::trace::Trace;
use crate::upstream::UpstreamSpec;

pub const SCENARIO: Scenario = Scenario {
    name: "keepalive-pool",
    shows: "a keep-alive pool grows for bursts on a healthy upstream: nothing shed from the first second on",
    runs,
    judge,
};

const KEEP_IDLE: u32 = 32;
const END_S: f64 = 120.0;

fn runs() -> Vec<Run> {
    let pooled = Client {
        keep_idle: Some(KEEP_IDLE),
        ..Client::default()
    };
    let service = Service::lognormal(0.03, 0.3);
    let setup = Setup {
        overflow: Default::default(),
        duration_s: END_S,
        upstream: UpstreamSpec::steady(200),
        classes: vec![
            RequestClass {
                service: service.clone(),
                load: Load::Poisson { per_s: 200.0 },
                client: pooled.clone(),
            },
            RequestClass {
                service,
                load: Load::Bursts {
                    size: 40,
                    every_s: 5.0,
                    first_s: 0.5,
                },
                client: pooled,
            },
        ],
    };
    vec![Run::limited("pool of 32 idle, bursts of 40", setup)]
}

fn judge(traces: &[Trace]) -> Judgement {
    let trace = &traces[0];
    let (from, to) = phase(1.0, END_S);
    let shed = trace.shed(from, to);
    let peak = trace.peak_inflight(from, to);
    Judgement {
        criteria: vec![Criterion::new(
            "from 1 s: shed",
            f64::from(shed),
            Bound::AtMost(0.0),
        )],
        key_figure: format!("{shed} shed from 1 s; pool peak {peak} connections"),
    }
}
