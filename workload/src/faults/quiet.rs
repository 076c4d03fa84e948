//! Requests for fault-free periods.
//!
//! Under Antithesis, `$ANTITHESIS_STOP_FAULTS <seconds>` pauses the platform's faults. Outside
//! it the request is published on a watch channel: a local fault injector heals everything
//! and holds off until the instant it names.

use properties::Property;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Clone)]
pub struct QuietRequests {
    until: watch::Sender<Option<Instant>>,
    count: Arc<AtomicU64>,
}

impl Default for QuietRequests {
    fn default() -> Self {
        Self { until: watch::channel(None).0, count: Arc::default() }
    }
}

impl QuietRequests {
    /// A liveness window reached its quiet point: asks for no faults during `quiet`.
    pub fn request_for_window(&self, quiet: Duration, why: &str) {
        crate::sdk::hold(Property::QuietPeriodRequested);
        self.request(quiet, why);
    }

    /// Asks for no faults during the next `quiet`; `why` goes to the log.
    pub fn request(&self, quiet: Duration, why: &str) {
        tracing::info!(why, "asking for {quiet:?} without faults");
        self.count.fetch_add(1, Relaxed);
        let until = Instant::now() + quiet;
        self.until.send_modify(|u| *u = Some(u.map_or(until, |old| old.max(until))));
        if let Some(cmd) = std::env::var_os("ANTITHESIS_STOP_FAULTS") {
            let secs = quiet.as_secs().max(1).to_string();
            match std::process::Command::new(&cmd).arg(&secs).spawn() {
                // Reap it off the async threads; its exit status carries no information.
                Ok(mut child) => drop(std::thread::spawn(move || child.wait())),
                Err(e) => tracing::warn!("cannot run ANTITHESIS_STOP_FAULTS ({cmd:?}): {e}"),
            }
        }
    }

    /// Requests made so far.
    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    /// For a local fault injector: the instant until which faults must stay off.
    pub fn subscribe(&self) -> watch::Receiver<Option<Instant>> {
        self.until.subscribe()
    }
}
