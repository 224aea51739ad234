//! Resolving `host` destinations away from the control loop. Each name is looked up on a
//! thread of its own (the system resolver offers no way to cancel a lookup), and the agent
//! waits for the answers no longer than a timeout: a resolver that never answers leaves a
//! thread waiting, never the heartbeat, the limits or the signal handling. A name is not
//! looked up again while its previous lookup still waits, so such a resolver costs one
//! thread per name, not one per name and round.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{SocketAddr, ToSocketAddrs},
    sync::Mutex,
    time::Duration,
};

use tokio::sync::oneshot;
use tracing::warn;

use crate::config::Config;

/// How long the agent waits for all the names of one resolution.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The addresses of each `host` destination that resolved, by destination name.
pub type Resolved = BTreeMap<String, Vec<SocketAddr>>;

/// The hosts whose lookup thread has not returned yet.
static LOOKING_UP: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Resolves every `host` of `config`; a name that fails or does not answer in time is
/// left out (and logged), so that the plan keeps its previous addresses.
pub async fn resolve(config: &Config, timeout: Duration) -> Resolved {
    let lookups: Vec<_> = config
        .destinations
        .iter()
        .filter_map(|d| Some((d.name.clone(), d.host.clone()?)))
        .filter(|(name, host)| {
            let started = LOOKING_UP.lock().unwrap().insert(host.clone());
            if !started {
                warn!(destination = %name, "cannot resolve {host}: its previous lookup has not answered yet");
            }
            started
        })
        .map(|(name, host)| {
            let (tx, rx) = oneshot::channel();
            let lookup = host.clone();
            std::thread::spawn(move || {
                let answer = lookup.to_socket_addrs().map(Iterator::collect);
                LOOKING_UP.lock().unwrap().remove(&lookup);
                let _ = tx.send(answer);
            });
            (name, host, rx)
        })
        .collect();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut resolved = Resolved::new();
    for (name, host, answer) in lookups {
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(Ok(Ok(addrs))) => {
                resolved.insert(name, addrs);
            }
            Ok(Ok(Err(e))) => warn!(destination = %name, "cannot resolve {host}: {e}"),
            _ => warn!(destination = %name, "cannot resolve {host}: no answer within {timeout:?}"),
        }
    }
    resolved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn literal_hosts_resolve_and_address_lists_need_no_lookup() {
        let config: Config = toml::from_str(
            "[[destination]]\nname = \"a\"\nhost = \"127.0.0.1:80\"\n\
             [[destination]]\nname = \"b\"\naddresses = [\"127.0.0.1:81\"]\n",
        )
        .unwrap();
        let resolved = resolve(&config, TIMEOUT).await;
        assert_eq!(resolved.len(), 1);
        assert_eq!(
            resolved["a"],
            ["127.0.0.1:80".parse::<SocketAddr>().unwrap()]
        );
    }
}
