//! The log: what a person reading a run should see.
//!
//! Under our own faults the client logs a connection error every time a node dies or a link
//! is cut ("expected INFO, got nothing", "connection refused"): thousands of lines that
//! bury the real ones. Without `RUST_LOG` they are counted, not printed; the count is in
//! every progress line and in `report.json`. Whether the cluster stayed unavailable for too
//! long is the liveness properties' question, not the log's. With `RUST_LOG` set, the filter
//! given is applied as written, so `RUST_LOG=info` shows every client event again.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{filter, EnvFilter, Layer};

static CLIENT_ERRORS: AtomicU64 = AtomicU64::new(0);

/// The client library's warnings and errors so far (printed or not).
pub fn client_errors() -> u64 {
    CLIENT_ERRORS.load(Relaxed)
}

/// Counts the client library's warnings and errors.
struct ClientErrors;

impl<S: tracing::Subscriber> Layer<S> for ClientErrors {
    fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
        CLIENT_ERRORS.fetch_add(1, Relaxed);
    }
}

/// Sets up the log on stderr: `RUST_LOG` when set, else our info and no client chatter.
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
