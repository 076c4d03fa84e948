//! The log: what a person reading a run should see.
//!
//! Under our own faults the client logs a connection error every time a node dies or a link
//! is cut ("expected INFO, got nothing", "connection refused"): thousands of lines that
//! bury the real ones. Without `RUST_LOG` they are counted, not printed; the count is in
//! every progress line and in `report.json`. Whether the cluster stayed unavailable for too
//! long is the liveness properties' question, not the log's; but errors that go on past a
//! whole liveness window are named in a warning ([`Persisting`]). With `RUST_LOG` set, the
//! filter given is applied as written, so `RUST_LOG=info` shows every client event again.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{filter, EnvFilter, Layer};

static CLIENT_ERRORS: AtomicU64 = AtomicU64::new(0);
static LAST_CLIENT_ERROR: Mutex<String> = Mutex::new(String::new());

/// The client library's warnings and errors so far (printed or not).
pub fn client_errors() -> u64 {
    CLIENT_ERRORS.load(Relaxed)
}

/// The client library's last warning or error.
pub fn last_client_error() -> String {
    LAST_CLIENT_ERROR.lock().map(|m| m.clone()).unwrap_or_default()
}

/// Counts the client library's warnings and errors, keeping the last one's text.
struct ClientErrors;

impl<S: tracing::Subscriber> Layer<S> for ClientErrors {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        CLIENT_ERRORS.fetch_add(1, Relaxed);
        let mut text = Message(String::new());
        event.record(&mut text);
        if let Ok(mut last) = LAST_CLIENT_ERROR.lock() {
            *last = text.0;
        }
    }
}

/// An event's `message` field.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

/// Client errors that go on without a break: a streak is a run of looks that each found new
/// errors since the one before. Once a streak has lasted a whole window, it is worth a
/// warning (and again after each further window).
#[derive(Debug, Default)]
pub struct Persisting {
    seen: u64,
    since: Option<Instant>,
    warned: Option<Instant>,
}

impl Persisting {
    /// A look at `now` with `errors` counted so far; how long the streak has lasted when it
    /// is time to warn.
    pub fn look(&mut self, now: Instant, errors: u64, window: Duration) -> Option<Duration> {
        let new = errors > self.seen;
        self.seen = errors;
        if !new {
            (self.since, self.warned) = (None, None);
            return None;
        }
        let since = *self.since.get_or_insert(now);
        let due = now.duration_since(self.warned.unwrap_or(since)) >= window;
        if due {
            self.warned = Some(now);
        }
        due.then(|| now.duration_since(since))
    }
}

/// Sets up the log on stderr: `RUST_LOG` when set, else our info and no client chatter.
/// Appends `record` to the JSON-lines file at `path` (faults.jsonl, operations.jsonl), one
/// open per line so every line is on disk as it happens; a write that fails is dropped.
pub fn append_json_line(path: &std::path::Path, record: &impl serde::Serialize) {
    use std::io::Write;
    if let (Ok(mut f), Ok(line)) = (std::fs::OpenOptions::new().create(true).append(true).open(path), serde_json::to_string(record)) {
        let _ = writeln!(f, "{line}");
    }
}

pub fn init() {
    let shown = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,async_nats=off"));
    let client = filter::Targets::new().with_target("async_nats", tracing::Level::WARN);
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_filter(shown),
        )
        .with(ClientErrors.with_filter(client))
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_without_a_break_for_a_whole_window_are_worth_a_warning() {
        let (t0, s) = (Instant::now(), Duration::from_secs);
        let mut p = Persisting::default();
        let w = s(120);
        assert_eq!(p.look(t0, 5, w), None);
        assert_eq!(p.look(t0 + s(110), 9, w), None, "not a whole window yet");
        assert_eq!(p.look(t0 + s(120), 12, w), Some(s(120)));
        assert_eq!(p.look(t0 + s(130), 13, w), None, "warned once per window");
        assert_eq!(p.look(t0 + s(240), 14, w), Some(s(240)));
        assert_eq!(p.look(t0 + s(250), 14, w), None, "a look without new errors ends the streak");
        assert_eq!(p.look(t0 + s(260), 15, w), None);
        assert_eq!(p.look(t0 + s(380), 16, w), Some(s(120)));
    }
}
