//! Requests for fault-free periods, and the one place that decides which are granted.
//!
//! Under Antithesis, `$ANTITHESIS_STOP_FAULTS <seconds>` pauses the platform's faults. Outside
//! it a granted request is published on a watch channel: a local fault injector heals
//! everything and holds off until the instant it names.
//!
//! Faults stopped too often stop exactly in the interesting states, so not every request
//! is granted: a liveness window at its quiet point and the final verification always are
//! (bounded liveness depends on them); a confirmation (a suspicious answer being watched
//! until it holds for a whole hold) at most once per liveness window. A confirmation that
//! is refused goes on under faults: it still needs every answer bad for the whole hold.

use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Why faults should pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// A liveness window reached its quiet point (its fault-free tail).
    WindowQuietPoint,
    /// A suspicious answer is being confirmed.
    Confirming,
    /// The final verification, after the drivers stopped.
    FinalVerification,
}

#[derive(Clone)]
pub struct QuietRequests {
    until: watch::Sender<Option<Instant>>,
    tally: Arc<Mutex<Tally>>,
    /// Confirmations get at most one quiet period per this long (the liveness window).
    confirm_every: Duration,
}

#[derive(Default)]
struct Tally {
    granted: u64,
    refused: u64,
    last_confirming: Option<Instant>,
    /// Time covered by granted quiet periods (their union), up to `covered_until`.
    covered: Duration,
    covered_until: Option<Instant>,
}

impl Default for QuietRequests {
    fn default() -> Self {
        Self::new(Duration::from_secs(120))
    }
}

impl QuietRequests {
    /// `window`: the liveness window, which rate-limits confirmations.
    pub fn new(window: Duration) -> Self {
        Self { until: watch::channel(None).0, tally: Arc::default(), confirm_every: window }
    }

    /// Asks for no faults during the next `quiet`; `reason` goes to the log. Returns
    /// whether it was granted.
    pub fn request(&self, why: Why, quiet: Duration, reason: &str) -> bool {
        let now = Instant::now();
        let Ok(mut t) = self.tally.lock() else { return false };
        if why == Why::Confirming {
            if t.last_confirming.is_some_and(|last| now.duration_since(last) < self.confirm_every) {
                t.refused += 1;
                tracing::debug!(reason, "quiet period refused: one was granted for a confirmation within the last liveness window");
                return false;
            }
            t.last_confirming = Some(now);
        }
        if why == Why::WindowQuietPoint {
            crate::sdk::hold!(Property::QuietPeriodRequested);
        }
        t.granted += 1;
        let until = now + quiet;
        let from = t.covered_until.map_or(now, |u| u.max(now));
        t.covered += until.saturating_duration_since(from);
        t.covered_until = Some(t.covered_until.map_or(until, |u| u.max(until)));
        drop(t);
        tracing::info!(reason, ?why, "asking for {quiet:?} without faults");
        self.until.send_modify(|u| *u = Some(u.map_or(until, |old| old.max(until))));
        if let Some(cmd) = std::env::var_os("ANTITHESIS_STOP_FAULTS") {
            let secs = quiet.as_secs().max(1).to_string();
            match std::process::Command::new(&cmd).arg(&secs).spawn() {
                // Reap it off the async threads; its exit status carries no information.
                Ok(mut child) => drop(std::thread::spawn(move || child.wait())),
                Err(e) => tracing::warn!("cannot run ANTITHESIS_STOP_FAULTS ({cmd:?}): {e}"),
            }
        }
        true
    }

    /// Requests granted so far.
    pub fn count(&self) -> u64 {
        self.tally.lock().map_or(0, |t| t.granted)
    }

    /// For the report: requests granted and refused, and the fraction of the time since
    /// `origin` that faults were allowed (quiet periods not yet over count to now only).
    pub fn summary(&self, origin: Instant) -> Value {
        let Ok(t) = self.tally.lock() else { return Value::Null };
        let now = Instant::now();
        let future = t.covered_until.map_or(Duration::ZERO, |u| u.saturating_duration_since(now));
        let quiet = t.covered.saturating_sub(future);
        let elapsed = now.duration_since(origin).as_secs_f64().max(1e-9);
        json!({ "granted": t.granted, "refused": t.refused, "quiet_s": quiet.as_secs_f64(),
                "faults_allowed_fraction": (1.0 - quiet.as_secs_f64() / elapsed).clamp(0.0, 1.0) })
    }

    /// For a local fault injector: the instant until which faults must stay off.
    pub fn subscribe(&self) -> watch::Receiver<Option<Instant>> {
        self.until.subscribe()
    }
}

pub(crate) fn quiet_until(quiet: &watch::Receiver<Option<Instant>>) -> Option<Instant> {
    (*quiet.borrow()).filter(|q| *q > Instant::now())
}

/// Resolves once a quiet period is requested (at once if one is in force); never without
/// a receiver.
pub async fn quiet_asked(quiet: Option<watch::Receiver<Option<Instant>>>) {
    let Some(mut quiet) = quiet else { return std::future::pending().await };
    while quiet_until(&quiet).is_none() {
        if quiet.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirmations_get_one_quiet_period_per_window_and_windows_always_get_theirs() {
        let q = QuietRequests::new(Duration::from_secs(60));
        assert!(q.request(Why::Confirming, Duration::from_secs(1), "first"));
        assert!(!q.request(Why::Confirming, Duration::from_secs(1), "again"), "rate-limited");
        assert!(q.request(Why::WindowQuietPoint, Duration::from_secs(1), "window"), "never refused");
        assert!(q.request(Why::FinalVerification, Duration::from_secs(1), "final"));
        let s = q.summary(Instant::now() - Duration::from_secs(10));
        assert_eq!((s["granted"].as_u64(), s["refused"].as_u64()), (Some(3), Some(1)));
        assert!(s["quiet_s"].as_f64().unwrap() < 0.1, "overlapping periods count once, and only up to now: {s}");
        assert!(s["faults_allowed_fraction"].as_f64().unwrap() > 0.98);
    }
}
