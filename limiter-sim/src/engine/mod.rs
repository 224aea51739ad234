//! The discrete-event loop: clients, the kernel's admission rule, the upstream and the
//! controller, advanced in virtual time.
//!
//! The controller is fed exactly what the kernel produces: time to first byte with the
//! in-flight count (connections) when the request started, and outcomes (error, shed, and
//! a client's close while awaiting a response with how long it had waited). It is updated
//! on the same 100 ms timer the agent uses.

mod queue;

use limiter_core::{Controller, Outcome};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::admission::{Admission, Overflow};
use crate::clients::{poisson_gap, Load, RequestClass};
use crate::clock::{secs, Nanos};
use crate::processor_sharing::ProcessorSharing;
use crate::trace::{Recorder, Trace};
use crate::upstream::{Discipline, Upstream, UpstreamSpec};
use queue::EventQueue;

/// The controller update interval of the agent.
pub const UPDATE_INTERVAL: Nanos = 100_000_000;
/// How long an upstream over its allowance takes to answer 429.
const OVERLOAD_ANSWER: Nanos = 1_000_000;

/// A complete description of one run, apart from the seed and the controller.
#[derive(Clone, Debug)]
pub struct Setup {
    pub duration_s: f64,
    pub upstream: UpstreamSpec,
    pub classes: Vec<RequestClass>,
    /// What a connect at the limit gets.
    pub overflow: Overflow,
}

type RequestId = usize;

#[derive(Clone, Copy)]
enum Event {
    /// A client sends a request of `class`; `worker` is set for closed-loop clients.
    Send { class: usize, worker: Option<u32> },
    /// The upstream is done working on a request: first byte, or failure.
    Served(RequestId),
    /// The processor-sharing upstream's next request is done, unless what it holds changed
    /// since this generation.
    SharedDone(u64),
    /// A streamed response's connection closes.
    Close(RequestId),
    /// The upstream answers 429 to a request over its allowance.
    Overloaded(RequestId),
    /// The upstream's capacity changes: queued requests may start.
    Capacity,
    /// A client's deadline for request `serial` (ids are reused, serials are not).
    Deadline { id: RequestId, serial: u64 },
    /// A burst of requests of `class`.
    Burst { class: usize },
    /// A queued connect's SYN is sent again: it asks for a slot (overflow = queue).
    Retry {
        class: usize,
        worker: Option<u32>,
        joined: Nanos,
        retries: u32,
    },
}

struct Request {
    class: usize,
    worker: Option<u32>,
    serial: u64,
    /// When its connection was admitted: the upstream's latency is timed from here.
    sent: Nanos,
    /// How long its connect waited in the queue first: the client's latency includes it.
    waited: Nanos,
    inflight_at_start: u32,
    fails: bool,
    /// The client closed its connection at its deadline; the upstream still works on it.
    abandoned: bool,
}

/// Runs `setup` to its end with `controller` setting the limit, and returns what happened.
pub fn simulate(setup: &Setup, seed: u64, controller: &mut dyn Controller) -> Trace {
    let mut sim = Sim::new(setup, seed, controller);
    sim.run();
    sim.recorder.finish()
}

struct Sim<'a> {
    setup: &'a Setup,
    now: Nanos,
    end: Nanos,
    next_update: Nanos,
    events: EventQueue<Event>,
    rng: Pcg64Mcg,
    admission: Admission,
    servers: Servers<'a>,
    controller: &'a mut dyn Controller,
    requests: Vec<Option<Request>>,
    free_ids: Vec<RequestId>,
    serial: u64,
    /// Idle keep-alive connections to the destination: open, counted in flight, carrying
    /// nothing, shared by the classes that pool.
    idle: u32,
    /// Requests the upstream holds, queued or served (given up on by their client or not).
    held: u32,
    /// Connects waiting in the limiter's queue (overflow = queue).
    waiting: u32,
    recorder: Recorder,
}

/// The upstream's servers, as its discipline has them.
enum Servers<'a> {
    Workers(Upstream<'a, RequestId>),
    Shared(ProcessorSharing<RequestId>),
}

impl<'a> Sim<'a> {
    fn new(setup: &'a Setup, seed: u64, controller: &'a mut dyn Controller) -> Self {
        let end = secs(setup.duration_s);
        let mut sim = Self {
            setup,
            now: 0,
            end,
            next_update: UPDATE_INTERVAL,
            events: EventQueue::new(),
            rng: Pcg64Mcg::seed_from_u64(seed),
            admission: Admission::new(controller.limit()),
            servers: match setup.upstream.discipline {
                Discipline::Workers => Servers::Workers(Upstream::new(&setup.upstream)),
                Discipline::ProcessorSharing => {
                    Servers::Shared(ProcessorSharing::new(setup.upstream.capacity.at(0)))
                }
            },
            controller,
            requests: Vec::new(),
            free_ids: Vec::new(),
            serial: 0,
            idle: 0,
            held: 0,
            waiting: 0,
            recorder: Recorder::new(end),
        };
        sim.recorder.tick(0, sim.admission.limit(), 0);
        for at in setup.upstream.capacity.breakpoints() {
            sim.events.push(at, Event::Capacity);
        }
        for (class, spec) in setup.classes.iter().enumerate() {
            match &spec.load {
                Load::Poisson { per_s } => {
                    let at = poisson_gap(*per_s, &mut sim.rng);
                    sim.events.push(
                        at,
                        Event::Send {
                            class,
                            worker: None,
                        },
                    );
                }
                Load::Closed(closed) => {
                    for worker in 0..closed.workers {
                        // Staggered over the first second so the clients do not start in
                        // lockstep, unless the scenario is a burst on attach.
                        let at = if closed.at_once {
                            0
                        } else {
                            sim.rng.random_range(0..secs(1.0))
                        };
                        let worker = Some(worker);
                        sim.events.push(at, Event::Send { class, worker });
                    }
                }
                Load::Bursts { first_s, .. } => {
                    sim.events.push(secs(*first_s), Event::Burst { class });
                }
            }
        }
        sim
    }

    fn run(&mut self) {
        loop {
            let next_event = self.events.next_at().unwrap_or(Nanos::MAX);
            if self.next_update <= next_event {
                if self.next_update >= self.end {
                    return;
                }
                self.now = self.next_update;
                self.update();
                self.next_update += UPDATE_INTERVAL;
                continue;
            }
            if next_event >= self.end {
                return;
            }
            let (at, event) = self.events.pop().expect("peeked an event");
            self.now = at;
            match event {
                Event::Send { class, worker } => self.send(class, worker),
                Event::Served(id) => self.served(id),
                Event::SharedDone(generation) => self.shared_done(generation),
                Event::Close(id) => self.end_request(id, false),
                Event::Overloaded(id) => self.overloaded(id),
                Event::Capacity => self.capacity_changed(),
                Event::Deadline { id, serial } => self.deadline(id, serial),
                Event::Burst { class } => self.burst(class),
                Event::Retry {
                    class,
                    worker,
                    joined,
                    retries,
                } => self.retry(class, worker, joined, retries),
            }
        }
    }

    fn update(&mut self) {
        let limit = self.controller.update(self.now);
        self.admission.set_limit(limit);
        self.recorder
            .tick(self.now, limit, self.admission.inflight());
    }

    fn burst(&mut self, class: usize) {
        let Load::Bursts { size, every_s, .. } = self.setup.classes[class].load else {
            unreachable!("a burst event for a class without bursts");
        };
        self.events
            .push(self.now + secs(every_s), Event::Burst { class });
        for _ in 0..size {
            self.send(class, None);
        }
    }

    /// A connection for a request of `class`: an idle pooled one, or a new connect that
    /// the limit may refuse, whose handshake the kernel reports at once (loopback). Returns
    /// the in-flight count the request starts with.
    fn connection(&mut self, class: usize) -> Option<u32> {
        let pools = self.setup.classes[class].client.keep_idle.is_some();
        if pools && self.idle > 0 {
            self.idle -= 1;
            return Some(self.admission.inflight());
        }
        self.admit()
    }

    fn admit(&mut self) -> Option<u32> {
        let inflight = self.admission.try_admit()?;
        self.controller.on_connect(self.now, inflight);
        Some(inflight)
    }

    fn send(&mut self, class: usize, worker: Option<u32>) {
        let spec = &self.setup.classes[class];
        if let Load::Poisson { per_s } = spec.load {
            let at = self.now + poisson_gap(per_s, &mut self.rng);
            self.events.push(at, Event::Send { class, worker });
        }
        match self.connection(class) {
            Some(inflight) => self.start(class, worker, inflight, 0),
            None => self.at_the_limit(class, worker),
        }
    }

    /// A connect at the limit: refused, or queued when the queue has room for it.
    fn at_the_limit(&mut self, class: usize, worker: Option<u32>) {
        // The agent hears of a queued connect as of a refused one: demand the limit did
        // not meet.
        self.controller.on_outcome(self.now, Outcome::Shed);
        if let Overflow::Queue(queue) = self.setup.overflow {
            let occupied = self.admission.inflight() + self.waiting;
            if queue.may_wait(self.admission.limit(), occupied, self.rng.random()) {
                self.waiting += 1;
                self.recorder.queued(self.now);
                let joined = self.now;
                self.events.push(
                    joined + queue.retry_after(0),
                    Event::Retry {
                        class,
                        worker,
                        joined,
                        retries: 0,
                    },
                );
                return;
            }
        }
        self.refused(class, worker);
    }

    /// The client sees its connect fail, and a closed-loop one tries again later.
    fn refused(&mut self, class: usize, worker: Option<u32>) {
        self.recorder.shed(self.now);
        if let Load::Closed(closed) = &self.setup.classes[class].load {
            let at = self.now + secs(closed.retry_after_s);
            self.events.push(at, Event::Send { class, worker });
        }
    }

    /// A queued connect's SYN again: admitted if a slot is free; failed at the maximum
    /// wait; abandoned at the client's own deadline; else retried on TCP's timer.
    fn retry(&mut self, class: usize, worker: Option<u32>, joined: Nanos, retries: u32) {
        let Overflow::Queue(queue) = self.setup.overflow else {
            unreachable!("a retry without a queue");
        };
        let waited = self.now - joined;
        let deadline = self.setup.classes[class].client.deadline_s.map(secs);
        if deadline.is_some_and(|d| waited >= d) {
            self.waiting -= 1;
            self.recorder.timed_out(self.now, waited);
            self.next_from(class, worker);
            return;
        }
        if waited >= queue.max_wait {
            self.waiting -= 1;
            self.refused(class, worker);
            return;
        }
        if let Some(inflight) = self.admit() {
            self.waiting -= 1;
            self.start(class, worker, inflight, waited);
            return;
        }
        let mut at = self.now + queue.retry_after(retries + 1);
        // TCP's timer is clamped to the deadlines: the maximum wait, the client's own.
        for end in [Some(queue.max_wait), deadline].into_iter().flatten() {
            at = at.min(joined + end);
        }
        self.events.push(
            at,
            Event::Retry {
                class,
                worker,
                joined,
                retries: retries + 1,
            },
        );
    }

    /// A request on an admitted connection, `waited` after its client sent it.
    fn start(&mut self, class: usize, worker: Option<u32>, inflight: u32, waited: Nanos) {
        let spec = &self.setup.classes[class];
        self.recorder.admitted(self.now, inflight);
        self.serial += 1;
        let request = Request {
            class,
            worker,
            serial: self.serial,
            sent: self.now,
            waited,
            inflight_at_start: inflight,
            fails: false,
            abandoned: false,
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.requests[id] = Some(request);
                id
            }
            None => {
                self.requests.push(Some(request));
                self.requests.len() - 1
            }
        };
        if let Some(deadline_s) = spec.client.deadline_s {
            let serial = self.serial;
            self.events.push(
                self.now - waited + secs(deadline_s),
                Event::Deadline { id, serial },
            );
        }
        if f64::from(self.held) >= self.setup.upstream.allowed.at(self.now) {
            self.events
                .push(self.now + OVERLOAD_ANSWER, Event::Overloaded(id));
            return;
        }
        self.held += 1;
        match &mut self.servers {
            Servers::Workers(workers) => {
                workers.enqueue(id);
                self.start_ready();
            }
            Servers::Shared(_) => {
                let work = self.begin_service(id);
                if let Servers::Shared(shared) = &mut self.servers {
                    shared.add(self.now, id, work);
                }
                self.schedule_shared();
            }
        }
    }

    /// Workers free at `now` pick up the requests waiting longest.
    fn start_ready(&mut self) {
        loop {
            let Servers::Workers(workers) = &mut self.servers else {
                return;
            };
            let Some(id) = workers.next_to_start(self.now) else {
                return;
            };
            let at = self.now + self.begin_service(id);
            self.events.push(at, Event::Served(id));
        }
    }

    /// The upstream starts on request `id` at `now`: decides whether it fails, and draws
    /// the time it takes at the latency factor in force.
    fn begin_service(&mut self, id: RequestId) -> Nanos {
        let spec = &self.setup.upstream;
        let factor = spec.latency_factor.at(self.now);
        let fails = self.rng.random::<f64>() < spec.error_rate.at(self.now);
        let request = self.requests[id].as_mut().expect("a live request");
        let service = &self.setup.classes[request.class].service;
        request.fails = fails;
        service.draw(&mut self.rng, factor)
    }

    fn capacity_changed(&mut self) {
        match &mut self.servers {
            Servers::Workers(_) => self.start_ready(),
            Servers::Shared(shared) => {
                shared.set_cores(self.now, self.setup.upstream.capacity.at(self.now));
                self.schedule_shared();
            }
        }
    }

    /// Schedules the processor-sharing upstream's next completion as things stand now.
    fn schedule_shared(&mut self) {
        if let Servers::Shared(shared) = &self.servers {
            if let Some((at, generation)) = shared.next_done() {
                self.events.push(at, Event::SharedDone(generation));
            }
        }
    }

    fn shared_done(&mut self, generation: u64) {
        let Servers::Shared(shared) = &self.servers else {
            return;
        };
        if !shared.is_current(generation) {
            return;
        }
        // Serving a request never adds one to the upstream (the next is sent by an event of
        // its own), so what is done now can be taken out first.
        let mut done = Vec::new();
        if let Servers::Shared(shared) = &mut self.servers {
            while let Some(id) = shared.pop_done(self.now) {
                done.push(id);
            }
        }
        for id in done {
            self.served(id);
        }
        self.schedule_shared();
    }

    /// A request leaves a worker (a processor-sharing upstream has already let it go when
    /// its work was done).
    fn release_server(&mut self) {
        if let Servers::Workers(workers) = &mut self.servers {
            workers.release();
            self.start_ready();
        }
    }

    fn served(&mut self, id: RequestId) {
        self.held -= 1;
        let request = self.requests[id].as_ref().expect("a live request");
        if request.abandoned {
            self.requests[id] = None;
            self.free_ids.push(id);
            self.release_server();
            return;
        }
        if request.fails {
            self.controller.on_outcome(self.now, Outcome::Error);
            self.end_request(id, true);
            return;
        }
        let latency = self.now - request.sent;
        let hold_s = self.setup.classes[request.class].service.hold_s;
        self.controller
            .on_sample(self.now, latency, request.inflight_at_start);
        self.recorder.sample(self.now, latency + request.waited);
        // Answered: the deadline no longer applies.
        self.requests[id].as_mut().expect("a live request").serial = 0;
        if hold_s > 0.0 {
            self.events.push(self.now + secs(hold_s), Event::Close(id));
        } else {
            self.end_request(id, false);
        }
    }

    /// The client's deadline passed with no first byte: it closes the connection, and the
    /// kernel reports the close with the time waited.
    fn deadline(&mut self, id: RequestId, serial: u64) {
        let Some(request) = self.requests[id].as_mut() else {
            return;
        };
        if request.serial != serial || request.abandoned {
            return;
        }
        request.abandoned = true;
        let waited_ns = self.now - request.sent;
        let client_waited = waited_ns + request.waited;
        let (class, worker) = (request.class, request.worker);
        self.controller
            .on_outcome(self.now, Outcome::GaveUp { waited_ns });
        self.recorder.timed_out(self.now, client_waited);
        self.admission.release();
        self.next_from(class, worker);
    }

    /// The upstream answered 429 to a request it never took up: the client closes the
    /// connection and, told to come back later, does so as after a refusal.
    fn overloaded(&mut self, id: RequestId) {
        let request = self.requests[id].take().expect("a live request");
        self.free_ids.push(id);
        if request.abandoned {
            return;
        }
        self.controller.on_outcome(self.now, Outcome::Overload);
        self.recorder.overloaded(self.now);
        self.recorder
            .ended(self.now, self.now - request.sent + request.waited, true);
        self.admission.release();
        if let (Some(_), Load::Closed(closed)) =
            (request.worker, &self.setup.classes[request.class].load)
        {
            let at = self.now + secs(closed.retry_after_s);
            let (class, worker) = (request.class, request.worker);
            self.events.push(at, Event::Send { class, worker });
        }
    }

    fn end_request(&mut self, id: RequestId, failed: bool) {
        let request = self.requests[id].take().expect("a live request");
        self.free_ids.push(id);
        let client = &self.setup.classes[request.class].client;
        let pooled = !failed && client.keep_idle.is_some_and(|keep| self.idle < keep);
        if pooled {
            self.idle += 1;
        } else {
            if let (Some(goodbye_s), false) = (client.goodbye_s, failed) {
                let waited_ns = secs(goodbye_s);
                self.controller
                    .on_outcome(self.now, Outcome::GaveUp { waited_ns });
            }
            self.admission.release();
        }
        self.recorder
            .ended(self.now, self.now - request.sent + request.waited, failed);
        self.next_from(request.class, request.worker);
        self.release_server();
    }

    /// A closed-loop worker whose request ended sends its next one after thinking.
    fn next_from(&mut self, class: usize, worker: Option<u32>) {
        if worker.is_none() {
            return;
        }
        let Load::Closed(closed) = &self.setup.classes[class].load else {
            return;
        };
        let at = self.now + secs(closed.think_s);
        self.events.push(at, Event::Send { class, worker });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::Service;
    use crate::clock::as_secs;

    /// Records what the engine feeds a controller, and holds a fixed limit.
    #[derive(Default)]
    struct Probe {
        limit: u32,
        samples: Vec<(Nanos, Nanos, u32)>,
        outcomes: Vec<Outcome>,
        updates: u32,
    }

    impl Controller for Probe {
        fn on_sample(&mut self, now_ns: u64, latency_ns: u64, inflight: u32) {
            self.samples.push((now_ns, latency_ns, inflight));
        }
        fn on_outcome(&mut self, _now_ns: u64, outcome: Outcome) {
            self.outcomes.push(outcome);
        }
        fn update(&mut self, _now_ns: u64) -> u32 {
            self.updates += 1;
            self.limit
        }
        fn limit(&self) -> u32 {
            self.limit
        }
    }

    fn closed_loop(capacity: u32, workers: u32, duration_s: f64) -> Setup {
        Setup {
            overflow: Default::default(),
            duration_s,
            upstream: UpstreamSpec::steady(capacity),
            classes: vec![RequestClass::new(
                Service::lognormal(0.1, 0.3),
                Load::closed(workers, 0.5),
            )],
        }
    }

    #[test]
    fn the_limit_bounds_inflight_and_the_excess_is_shed() {
        let setup = closed_loop(40, 30, 60.0);
        let mut probe = Probe {
            limit: 10,
            ..Probe::default()
        };
        let trace = simulate(&setup, 7, &mut probe);
        assert_eq!(trace.peak_inflight(0, secs(60.0)), 10);
        assert!(trace.shed(0, secs(60.0)) > 0);
        assert!(probe.outcomes.iter().all(|o| *o == Outcome::Shed));
        assert!(probe.samples.iter().all(|&(_, _, inflight)| inflight <= 10));
        assert_eq!(probe.updates, 599, "one update every 100 ms");
        // Ten slots on an idle upstream, 0.1 s median: about 95 requests a second.
        let goodput = trace.goodput(secs(10.0), secs(60.0));
        assert!((85.0..100.0).contains(&goodput), "goodput {goodput}");
    }

    #[test]
    fn latency_grows_with_queueing_beyond_capacity() {
        let setup = closed_loop(10, 40, 30.0);
        let mut probe = Probe {
            limit: 1000,
            ..Probe::default()
        };
        let trace = simulate(&setup, 1, &mut probe);
        let p50 = trace.seconds[20].p50_s.expect("samples in second 20");
        // 40 requests share 10 workers: each waits about three services before its own.
        assert!((0.3..0.5).contains(&p50), "p50 {p50}");
        assert_eq!(trace.peak_inflight(0, secs(30.0)), 40);
    }

    #[test]
    fn same_seed_same_run_other_seed_other_run() {
        let setup = closed_loop(20, 30, 20.0);
        let run = |seed| {
            let mut probe = Probe {
                limit: 25,
                ..Probe::default()
            };
            simulate(&setup, seed, &mut probe);
            probe.samples
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn a_stream_is_sampled_at_its_first_byte_and_holds_its_slot() {
        let setup = Setup {
            overflow: Default::default(),
            duration_s: 300.0,
            upstream: UpstreamSpec::steady(500),
            classes: vec![RequestClass::new(
                Service::lognormal(0.28, 0.2).streamed(45.0),
                Load::Poisson { per_s: 1.0 },
            )],
        };
        let mut probe = Probe {
            limit: 200,
            ..Probe::default()
        };
        let trace = simulate(&setup, 5, &mut probe);
        let longest = probe
            .samples
            .iter()
            .map(|s| as_secs(s.1))
            .fold(0.0, f64::max);
        assert!(
            longest < 1.0,
            "samples are first-byte times, got {longest} s"
        );
        // Little's law: one stream a second held 45 s keeps about 45 connections open.
        let inflight = trace.ticks.last().expect("ticks").inflight;
        assert!((30..60).contains(&inflight), "in-flight {inflight}");
    }

    #[test]
    fn shared_cores_slow_every_request_once_they_are_outnumbered() {
        // Eight clients always holding a request of exactly 100 ms on four shared cores:
        // each gets half a core, every answer takes 200 ms, and none waits in a queue.
        let setup = Setup {
            overflow: Default::default(),
            upstream: UpstreamSpec {
                discipline: Discipline::ProcessorSharing,
                ..UpstreamSpec::steady(4)
            },
            classes: vec![RequestClass::new(
                Service::lognormal(0.1, 0.0),
                Load::closed(8, 0.5),
            )],
            duration_s: 20.0,
        };
        let mut probe = Probe {
            limit: 100,
            ..Probe::default()
        };
        let trace = simulate(&setup, 3, &mut probe);
        let settled: Vec<f64> = probe
            .samples
            .iter()
            .filter(|s| s.0 > secs(5.0))
            .map(|s| as_secs(s.1))
            .collect();
        assert!(settled.len() > 500);
        assert!(
            settled.iter().all(|l| (l - 0.2).abs() < 1e-6),
            "{settled:?}"
        );
        // Four cores' worth of 100 ms requests: 40 a second.
        let goodput = trace.goodput(secs(5.0), secs(20.0));
        assert!((goodput - 40.0).abs() <= 1.0, "goodput {goodput}");
    }

    #[test]
    fn failures_are_reported_as_errors_without_a_sample() {
        let mut setup = closed_loop(10, 5, 20.0);
        setup.upstream.error_rate = crate::schedule::Schedule::constant(1.0);
        let mut probe = Probe {
            limit: 10,
            ..Probe::default()
        };
        let trace = simulate(&setup, 2, &mut probe);
        assert!(probe.samples.is_empty());
        assert!(probe.outcomes.len() > 100);
        assert!(probe.outcomes.iter().all(|o| *o == Outcome::Error));
        assert_eq!(trace.goodput(0, secs(20.0)), 0.0);
    }
}
