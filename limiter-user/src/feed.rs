//! The agent's event stream for `limiter-user events`: decisions and limit changes as
//! JSON lines on a root-only Unix socket next to the agent's lock.
//!
//! Every reader has a bounded queue of its own: a reader that falls behind loses the
//! oldest lines and is told how many, and never slows the agent or the other readers.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result};
use limiter_common::{EventKind, LimiterEvent};
use serde::{Deserialize, Serialize};
use tokio::{
    io::AsyncWriteExt,
    net::{UnixListener, UnixStream},
    sync::broadcast::{self, error::RecvError},
};

use crate::{
    accept::AcceptFailures,
    lock::{self, RUN_DIR},
    pins::PinDir,
};

/// Lines a reader may fall behind before it loses the oldest.
const READER_QUEUE: usize = 4096;

/// The first line to every reader, sent once it is subscribed: a reader that has read it
/// gets every event published after, so it can say it is following without a race.
pub const GREETING: &str = "{\"following\":true}";

/// One line of the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A connect refused at the limit.
    Shed(Decision),
    /// A connect shadow mode let through where prod would have refused it.
    WouldShed(Decision),
    /// A connect handed to a peer with room.
    Redirected(Decision),
    /// A connect shadow mode let through where prod would have redirected it.
    WouldRedirect(Decision),
    /// A connect at the limit held until a slot frees (overflow = queue).
    Queued(Decision),
    /// A connect refused: the queue was past its bounds.
    QueueFull(Decision),
    /// A queued connect left its queue: admitted, expired or abandoned.
    Waited(WaitEnded),
    /// A destination's limit moved.
    Limit(LimitChange),
    /// This reader fell behind and missed `count` lines.
    Lost { count: u64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Unix time in milliseconds.
    pub at_ms: u64,
    pub destination: String,
    /// Where a (would-be) redirect went.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peer: Option<String>,
    pub limit: u32,
    pub inflight: u32,
    pub pid: u32,
    pub comm: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitEnded {
    pub at_ms: u64,
    pub destination: String,
    /// admitted (took a freed slot), expired (failed at the maximum wait), or abandoned
    /// (closed by the application first).
    pub end: String,
    pub waited_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitChange {
    pub at_ms: u64,
    pub destination: String,
    pub old: u32,
    pub new: u32,
    /// Why: the latency the controller saw against its baseline, and the error and timeout
    /// verdicts since the previous change.
    pub p90_ms: Option<f64>,
    pub baseline_ms: Option<f64>,
    pub errors: u32,
    pub timeouts: u32,
    /// Overload answers (HTTP 429, 503) since the previous change.
    #[serde(default)]
    pub overloads: u32,
    /// The configuration changed (reload): the controller started again.
    pub reconfigured: bool,
}

impl Event {
    pub fn decision(kind: EventKind, ev: &LimiterEvent) -> Event {
        let decision = Decision {
            at_ms: now_ms(),
            destination: ev.dest.socket_addr().to_string(),
            peer: kind.has_peer().then(|| ev.peer.socket_addr().to_string()),
            limit: ev.limit,
            inflight: ev.inflight,
            pid: ev.pid,
            comm: ev.comm().to_string(),
        };
        match kind {
            EventKind::Shed => Event::Shed(decision),
            EventKind::WouldShed => Event::WouldShed(decision),
            EventKind::Redirected => Event::Redirected(decision),
            EventKind::WouldRedirect => Event::WouldRedirect(decision),
            EventKind::Queued => Event::Queued(decision),
            EventKind::QueueFull => Event::QueueFull(decision),
        }
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The sending side, cheap to clone; encodes each event once, and only while someone reads.
#[derive(Clone)]
pub struct Feed(broadcast::Sender<Arc<str>>);

impl Default for Feed {
    fn default() -> Self {
        Feed(broadcast::channel(READER_QUEUE).0)
    }
}

impl Feed {
    pub fn publish(&self, event: impl FnOnce() -> Option<Event>) {
        if self.0.receiver_count() == 0 {
            return;
        }
        if let Some(line) = event().and_then(|e| serde_json::to_string(&e).ok()) {
            // No receiver left since the check: nobody to tell.
            let _ = self.0.send(line.into());
        }
    }
}

/// The socket of the agent whose pins are in `pins`.
pub fn socket_path(pins: &PinDir) -> PathBuf {
    let name = pins
        .path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Path::new(RUN_DIR).join(format!("{name}.events"))
}

/// The listening socket; removed when dropped.
pub struct FeedSocket(PathBuf);

impl Drop for FeedSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Listens on `path` and streams `feed` to every reader that connects.
pub fn serve(path: PathBuf, feed: Feed) -> Result<FeedSocket> {
    lock::private_run_dir()?;
    // A socket left by an agent that was killed; the lock says none is running now.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)
        .with_context(|| format!("cannot listen for event readers on {}", path.display()))?;
    let socket = FeedSocket(path);
    std::fs::set_permissions(&socket.0, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {} to root", socket.0.display()))?;
    let own_uid = nix::unistd::geteuid().as_raw();
    tokio::spawn(async move {
        let mut failures = AcceptFailures::default();
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    failures.failed("events", &e).await;
                    continue;
                }
            };
            failures.succeeded();
            // Between bind and chmod anyone could have connected: decisions name processes.
            if !stream.peer_cred().is_ok_and(|c| c.uid() == own_uid) {
                continue;
            }
            tokio::spawn(stream_to(stream, feed.0.subscribe()));
        }
    });
    Ok(socket)
}

async fn stream_to(mut stream: UnixStream, mut rx: broadcast::Receiver<Arc<str>>) {
    let mut line = GREETING.to_owned();
    line.push('\n');
    if stream.write_all(line.as_bytes()).await.is_err() {
        return;
    }
    loop {
        let line: Arc<str> = match rx.recv().await {
            Ok(line) => line,
            Err(RecvError::Lagged(count)) => match serde_json::to_string(&Event::Lost { count }) {
                Ok(line) => line.into(),
                Err(_) => continue,
            },
            Err(RecvError::Closed) => return,
        };
        let sent = async {
            stream.write_all(line.as_bytes()).await?;
            stream.write_all(b"\n").await
        };
        if sent.await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change() -> Event {
        Event::Limit(LimitChange {
            at_ms: 1,
            destination: "127.0.0.1:80".into(),
            old: 20,
            new: 14,
            p90_ms: Some(58.0),
            baseline_ms: Some(41.0),
            errors: 0,
            timeouts: 2,
            overloads: 0,
            reconfigured: false,
        })
    }

    #[test]
    fn lines_round_trip_with_their_kind_named() {
        let line = serde_json::to_string(&change()).unwrap();
        assert!(line.starts_with(r#"{"event":"limit","#), "{line}");
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), change());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_slow_reader_loses_lines_and_is_told_how_many() {
        let feed = Feed::default();
        let mut slow = feed.0.subscribe();
        for _ in 0..READER_QUEUE + 10 {
            feed.publish(|| Some(change()));
        }
        assert!(matches!(slow.recv().await, Err(RecvError::Lagged(10))));
        assert!(slow.recv().await.is_ok(), "the newest lines are kept");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_reader_is_greeted_and_then_gets_what_is_published() {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let feed = Feed::default();
        let (agent_end, reader_end) = UnixStream::pair().unwrap();
        tokio::spawn(stream_to(agent_end, feed.0.subscribe()));
        let mut lines = BufReader::new(reader_end).lines();
        assert_eq!(lines.next_line().await.unwrap().unwrap(), GREETING);
        feed.publish(|| Some(change()));
        let line = lines.next_line().await.unwrap().unwrap();
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), change());
    }
}
