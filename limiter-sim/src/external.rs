//! Algorithms in other processes, spoken to over a line protocol on stdin/stdout, so that
//! reference implementations in other languages and users' own algorithms run on exactly
//! the traffic the built-in ones see. The protocol is documented in docs/simulation.md:
//!
//! ```text
//! to the algorithm                     from the algorithm
//! init <initial> <min> <max>
//! sample <now_ns> <latency_ns> <inflight>
//! connect <now_ns> <inflight>
//! outcome <now_ns> error|timeout|shed|untimed|overload
//! outcome <now_ns> gave_up|hung_up <waited_ns>
//! tick <now_ns>                        <limit>
//! ```

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{anyhow, bail, Context};
use limiter_core::{Controller, Limits, Outcome};

pub struct ExternalController {
    command: String,
    child: Child,
    to: BufWriter<ChildStdin>,
    from: BufReader<ChildStdout>,
    line: String,
    limit: u32,
    /// The first protocol or I/O failure; the run goes on at the last limit and
    /// [`ExternalController::finish`] reports it.
    fault: Option<anyhow::Error>,
}

impl ExternalController {
    /// Starts `command` through `sh -c` and tells it the limits it must keep to.
    pub fn spawn(command: &str, limits: Limits) -> anyhow::Result<Self> {
        let mut child = Command::new("sh")
            .args(["-c", command])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting external algorithm {command:?}"))?;
        let to = BufWriter::new(child.stdin.take().expect("piped stdin"));
        let from = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut external = Self {
            command: command.to_owned(),
            child,
            to,
            from,
            line: String::new(),
            limit: limits.initial,
            fault: None,
        };
        external.send(format_args!(
            "init {} {} {}",
            limits.initial, limits.min, limits.max
        ));
        Ok(external)
    }

    /// Closes the algorithm's input, waits for it to exit, and reports any failure.
    pub fn finish(self) -> anyhow::Result<()> {
        let Self {
            command,
            mut child,
            to,
            fault,
            ..
        } = self;
        drop(to);
        let status = child.wait();
        if let Some(fault) = fault {
            return Err(fault.context(format!("external algorithm {command:?}")));
        }
        let status = status.with_context(|| format!("waiting for {command:?}"))?;
        if !status.success() {
            bail!("external algorithm {command:?} exited with {status}");
        }
        Ok(())
    }

    fn send(&mut self, line: std::fmt::Arguments<'_>) {
        if self.fault.is_none() {
            if let Err(e) = writeln!(self.to, "{line}") {
                self.fault = Some(anyhow!(e).context("writing to the algorithm"));
            }
        }
    }

    fn answer(&mut self) -> anyhow::Result<u32> {
        self.to.flush().context("writing to the algorithm")?;
        self.line.clear();
        let read = self.from.read_line(&mut self.line)?;
        if read == 0 {
            bail!("the algorithm closed its output instead of answering a tick");
        }
        let text = self.line.trim();
        text.parse()
            .with_context(|| format!("expected a limit after a tick, got {text:?}"))
    }
}

impl Controller for ExternalController {
    fn on_sample(&mut self, now_ns: u64, latency_ns: u64, inflight: u32) {
        self.send(format_args!("sample {now_ns} {latency_ns} {inflight}"));
    }

    fn on_connect(&mut self, now_ns: u64, inflight: u32) {
        self.send(format_args!("connect {now_ns} {inflight}"));
    }

    fn on_outcome(&mut self, now_ns: u64, outcome: Outcome) {
        match outcome {
            Outcome::Error => self.send(format_args!("outcome {now_ns} error")),
            Outcome::Timeout => self.send(format_args!("outcome {now_ns} timeout")),
            Outcome::Shed => self.send(format_args!("outcome {now_ns} shed")),
            Outcome::Untimed => self.send(format_args!("outcome {now_ns} untimed")),
            Outcome::Overload => self.send(format_args!("outcome {now_ns} overload")),
            Outcome::GaveUp { waited_ns } => {
                self.send(format_args!("outcome {now_ns} gave_up {waited_ns}"))
            }
            Outcome::HungUp { waited_ns } => {
                self.send(format_args!("outcome {now_ns} hung_up {waited_ns}"))
            }
        }
    }

    fn update(&mut self, now_ns: u64) -> u32 {
        self.send(format_args!("tick {now_ns}"));
        if self.fault.is_none() {
            match self.answer() {
                Ok(limit) => self.limit = limit,
                Err(e) => self.fault = Some(e),
            }
        }
        self.limit
    }

    fn limit(&self) -> u32 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speaks_the_protocol_and_takes_the_answered_limit() {
        // Answers each tick with the number of lines it has read so far.
        let script =
            r#"n=0; while read -r line; do n=$((n+1)); case $line in tick*) echo $n;; esac; done"#;
        let mut c = ExternalController::spawn(script, Limits::default()).expect("spawn");
        assert_eq!(c.limit(), Limits::default().initial);
        c.on_sample(1, 2, 3);
        c.on_connect(2, 3);
        c.on_outcome(4, Outcome::Shed);
        assert_eq!(c.update(5), 5, "init, sample, connect, outcome, tick");
        assert_eq!(c.update(6), 6);
        c.finish().expect("a clean exit");
    }

    #[test]
    fn a_garbled_answer_is_reported_after_the_run() {
        let mut c =
            ExternalController::spawn("read -r i; read -r t; echo ready", Limits::default())
                .expect("spawn");
        assert_eq!(
            c.update(1),
            Limits::default().initial,
            "keeps the last limit"
        );
        let err = format!("{:#}", c.finish().unwrap_err());
        assert!(err.contains("got \"ready\""), "{err}");
    }

    #[test]
    fn a_silent_exit_is_reported() {
        let mut c = ExternalController::spawn("true", Limits::default()).expect("spawn");
        c.update(1);
        let err = format!("{:#}", c.finish().unwrap_err());
        assert!(
            err.contains("closed its output") || err.contains("writing"),
            "{err}"
        );
    }
}
