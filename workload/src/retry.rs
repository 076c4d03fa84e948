//! The I/O side of bounded liveness windows: retry an operation under a
//! [`properties::liveness::Window`], ask for faults to pause at the quiet point, and report
//! the operation's liveness property when the window runs out.

use crate::faults::QuietRequests;
use crate::sdk;
use properties::liveness::{Next, Window, WindowConfig};
use properties::Property;
use serde_json::json;
use std::fmt::Display;
use std::future::Future;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Shared by every driver: the window settings, a clock origin and the quiet-period hook.
#[derive(Clone)]
pub struct Liveness {
    pub cfg: WindowConfig,
    pub origin: Instant,
    pub quiet: QuietRequests,
    /// Stop retrying after the first window runs out (the final verification must end).
    pub give_up: bool,
}

/// How a failure inside a window is handled; drivers that run their own loop use this.
pub struct OpenWindow<'a> {
    live: &'a Liveness,
    window: Window,
    op: &'static str,
    property: Property,
}

impl Liveness {
    pub fn now(&self) -> std::time::Duration {
        self.origin.elapsed()
    }

    pub fn open(&self, op: &'static str, property: Property) -> OpenWindow<'_> {
        OpenWindow { live: self, window: Window::open(self.cfg, self.now()), op, property }
    }

    /// Runs `f` until it succeeds; the success holds `property`. Every window that runs out
    /// is reported as a failure of `property`, and retrying goes on in a fresh window (or,
    /// with `give_up`, ends). `None` when cancelled or given up. Not for per-message paths.
    pub async fn retry<T, E: Display, Fut: Future<Output = Result<T, E>>>(
        &self,
        op: &'static str,
        property: Property,
        cancel: &CancellationToken,
        mut f: impl FnMut() -> Fut,
    ) -> Option<T> {
        let mut window: Option<OpenWindow> = None;
        loop {
            if cancel.is_cancelled() {
                return None;
            }
            match f().await {
                Ok(t) => {
                    match window {
                        Some(w) => w.succeeded(),
                        None => sdk::check(property, true, &json!({ "op": op, "failures": 0 })),
                    }
                    return Some(t);
                }
                Err(e) => {
                    let w = window.get_or_insert_with(|| self.open(op, property));
                    if !w.failed(&e.to_string(), cancel).await {
                        if self.give_up {
                            return None;
                        }
                        window = None; // expired and reported: start over
                    }
                }
            }
        }
    }
}

impl OpenWindow<'_> {
    /// Records a failure and waits before the next try. Returns false when the window ran
    /// out (the failure is reported); the caller opens a new one to keep trying.
    pub async fn failed(&mut self, error: &str, cancel: &CancellationToken) -> bool {
        let pause = match self.window.failed(self.live.now()) {
            Next::Retry(pause) => pause,
            Next::RequestQuiet { quiet, retry_after } => {
                self.live.quiet.request_for_window(quiet, &format!("{} failing for most of a liveness window: {error}", self.op));
                retry_after
            }
            Next::Expired { elapsed, failures } => {
                sdk::check(
                    self.property,
                    false,
                    &json!({ "op": self.op, "elapsed_s": elapsed.as_secs_f64(), "failures": failures, "last_error": error }),
                );
                return false;
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = tokio::time::sleep(pause) => {}
        }
        true
    }

    /// The operation succeeded inside the window.
    pub fn succeeded(self) {
        let elapsed = self.window.elapsed(self.live.now());
        sdk::check(self.property, true, &json!({ "op": self.op, "elapsed_s": elapsed.as_secs_f64(), "failures": self.window.failures() }));
    }
}
