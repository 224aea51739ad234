//! Ctrl-C and SIGTERM end the benchmark between two steps, so that what it started is
//! stopped and removed on the way out; a second one ends it at once.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc, OnceLock,
};

use anyhow::{bail, Result};
use signal_hook::consts::{SIGINT, SIGTERM};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

pub fn install() -> Result<()> {
    let flag = FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)));
    for signal in [SIGINT, SIGTERM] {
        // Registered first, so that it sees the flag still unset on the first signal.
        signal_hook::flag::register_conditional_shutdown(signal, 1, flag.clone())?;
        signal_hook::flag::register(signal, flag.clone())?;
    }
    Ok(())
}

pub fn check() -> Result<()> {
    if FLAG.get().is_some_and(|f| f.load(Ordering::Relaxed)) {
        bail!("interrupted");
    }
    Ok(())
}
