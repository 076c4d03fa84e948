//! The one I/O side of bounded liveness windows (see [`properties::liveness`]). Every wait
//! in the workload goes through it: retrying an operation until it succeeds, a driver's own
//! failure loop, a reader's catch-up (where progress starts the window over), and polling a
//! question until it is answered. At the quiet point of a window faults are asked to
//! pause; a window that runs out is a liveness failure (or, for a question, "unknown").
//!
//! No window passes by being left: when the run's time is up ([`Liveness::finishing`]) the
//! drivers finish what they had open, and a window that runs out then ends instead of
//! starting over; a window still undecided when it is dropped (the run was stopped under
//! it) is kept in [`Liveness::left_open`] and reported `unknown` by the run.

use crate::faults::quiet::Why;
use crate::faults::QuietRequests;
use crate::sdk;
use properties::liveness::{Next, Window, WindowConfig};
use properties::Property;
use serde_json::json;
use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A window's verdict on its liveness property, from this file's line: every bounded-window
/// property goes through here (see `sdk::check!` for a property known at run time).
macro_rules! window_verdict {
    ($p:expr, $held:expr, $details:expr) => {
        sdk::check!($p => [
            Property::PublishEventuallyAcked, Property::ConsumerEventuallyCatchesUp, Property::DurableEventuallyCatchesUp,
            Property::DurableReplicasAgreeAtRest, Property::ScaleEventuallySettles, Property::MoveEventuallySettles,
            Property::PeerRemovalEventuallyReplaced, Property::StepdownEventuallyElects,
            Property::ConsumerScaleEventuallySettles, Property::ClusterEventuallyHealthy,
        ], $held, $details)
    };
}

/// Shared by every driver: the window settings, a clock origin and the quiet-period hook.
#[derive(Clone)]
pub struct Liveness {
    pub cfg: WindowConfig,
    pub origin: Instant,
    pub quiet: QuietRequests,
    /// Stop retrying after the first window runs out (the final verification must end).
    pub give_up: bool,
    /// The run's time is up: start nothing new, finish what is open (faults are paused by
    /// then); a window that runs out from now on ends instead of starting over. Shared by
    /// every clone of this liveness (one per stream and epoch).
    pub finishing: CancellationToken,
    /// Windows dropped undecided: the run was stopped while they were open.
    left_open: Arc<Mutex<Vec<LeftOpen>>>,
}

/// A window the run was stopped under: its question was never answered.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LeftOpen {
    pub property: Property,
    pub op: &'static str,
    /// Seconds from the run's start: when it opened (or last progressed), and when it was left.
    pub opened_s: f64,
    pub left_s: f64,
    pub failures: u32,
}

/// One open window for one operation.
pub struct OpenWindow<'a> {
    live: &'a Liveness,
    window: Window,
    op: &'static str,
    /// The property the window decides: reported when it runs out or the operation
    /// succeeds (unless `reports` is false: a question whose caller reports the outcome).
    property: Option<Property>,
    reports: bool,
    /// A try failed (or, for a question, it was asked) and no verdict was given yet: left
    /// like that, the window is recorded as left open.
    undecided: bool,
    /// The last error and since when every try met it (a server repeating one answer for
    /// the whole quiet part of a window is evidence of its own state, see the known issues).
    same_error: Option<(String, Duration)>,
}

/// What a failure inside a window means, before any waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Try again after this pause.
    Retry(Duration),
    /// The window reached its quiet point just now (faults were asked to pause); try again
    /// after this pause.
    QuietStarted(Duration),
    /// The window ran out after this long.
    Expired(Duration),
}

impl Liveness {
    pub fn new(cfg: WindowConfig, origin: Instant, quiet: QuietRequests) -> Self {
        Self { cfg, origin, quiet, give_up: false, finishing: CancellationToken::new(), left_open: Arc::default() }
    }

    /// The same liveness (clock, quiet, stop phase, windows left open), giving up after one
    /// expired window or not.
    pub fn giving_up(&self, give_up: bool) -> Self {
        Liveness { give_up, ..self.clone() }
    }

    /// Whether a window that ran out ends here (instead of a fresh one starting).
    fn ends_on_expiry(&self) -> bool {
        self.give_up || self.finishing.is_cancelled()
    }

    /// Takes the windows left open so far (the run reports each as unknown).
    pub fn take_left_open(&self) -> Vec<LeftOpen> {
        std::mem::take(&mut *self.left_open.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    pub fn open(&self, op: &'static str, property: Property) -> OpenWindow<'_> {
        self.open_for(op, Some(property))
    }

    /// A window for a question (is this message there? do the replicas agree?): it paces
    /// the looks and asks for quiet, and when it runs out the answer is "unknown", which
    /// the caller reports.
    pub fn open_question(&self, op: &'static str) -> OpenWindow<'_> {
        self.open_for(op, None)
    }

    /// A question whose answer decides `property` (a reader catching up: its caller
    /// reports the outcome): open from the start, so left undecided it is recorded.
    pub fn open_question_for(&self, op: &'static str, property: Property) -> OpenWindow<'_> {
        let mut w = self.open_for(op, Some(property));
        (w.undecided, w.reports) = (true, false);
        w
    }

    fn open_for(&self, op: &'static str, property: Option<Property>) -> OpenWindow<'_> {
        OpenWindow { live: self, window: Window::open(self.cfg, self.now()), op, property, reports: true, undecided: false, same_error: None }
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
        self.retry_reporting(op, Some(property), cancel, || stalled(f())).await.ok()
    }

    /// [`Liveness::retry`] for an operation that can move forward while it still fails (a
    /// change copying the stream to a new peer): a failure that says it progressed starts
    /// the window over, so the window measures time without progress.
    pub async fn retry_progressing<T, Fut: Future<Output = Result<T, Failure>>>(
        &self,
        op: &'static str,
        property: Property,
        cancel: &CancellationToken,
        f: impl FnMut() -> Fut,
    ) -> Option<T> {
        self.retry_reporting(op, Some(property), cancel, f).await.ok()
    }

    /// [`Liveness::retry`] for one window, reporting nothing: for first contact with a
    /// cluster, where running out is "could not be carried out", not a liveness failure.
    /// The error is the last one seen (or "stopped").
    pub async fn attempt<T, E: Display, Fut: Future<Output = Result<T, E>>>(
        &self,
        op: &'static str,
        cancel: &CancellationToken,
        mut f: impl FnMut() -> Fut,
    ) -> Result<T, String> {
        let once = Liveness { give_up: true, ..self.clone() };
        once.retry_reporting(op, None, cancel, || stalled(f())).await
    }

    async fn retry_reporting<T, Fut: Future<Output = Result<T, Failure>>>(
        &self,
        op: &'static str,
        property: Option<Property>,
        cancel: &CancellationToken,
        mut f: impl FnMut() -> Fut,
    ) -> Result<T, String> {
        let mut window: Option<OpenWindow> = None;
        let mut last_error = "stopped".to_string();
        loop {
            if cancel.is_cancelled() {
                return Err(last_error);
            }
            match f().await {
                Ok(t) => {
                    match (window, property) {
                        (Some(w), _) => w.succeeded(),
                        (None, Some(p)) => window_verdict!(p, true, &json!({ "op": op, "failures": 0 })),
                        (None, None) => {}
                    }
                    return Ok(t);
                }
                Err(Failure { error, progressed }) => {
                    last_error = error;
                    let w = window.get_or_insert_with(|| self.open_for(op, property));
                    if progressed {
                        w.progressed();
                    }
                    if !w.failed(&last_error, cancel).await {
                        if self.ends_on_expiry() {
                            return Err(last_error);
                        }
                        window = None; // expired and reported: start over
                    }
                }
            }
        }
    }
}

/// A failed try of an operation retried inside a window.
#[derive(Clone, Debug)]
pub struct Failure {
    pub error: String,
    /// It still moved forward (see [`Liveness::retry_progressing`]).
    pub progressed: bool,
}

impl Failure {
    /// A failure that moved nothing forward.
    pub fn stalled(error: impl Display) -> Self {
        Failure { error: error.to_string(), progressed: false }
    }
}

async fn stalled<T, E: Display>(f: impl Future<Output = Result<T, E>>) -> Result<T, Failure> {
    f.await.map_err(Failure::stalled)
}

impl OpenWindow<'_> {
    /// Records a failure without waiting: what comes next. At the quiet point faults are
    /// asked to pause. Expiry is not reported here (the caller has the details).
    pub fn step(&mut self, error: &str) -> Step {
        self.undecided = true;
        let now = self.live.now();
        if self.same_error.as_ref().is_none_or(|(e, _)| e != error) {
            self.same_error = Some((error.to_string(), now));
        }
        match self.window.failed(now) {
            Next::Retry(pause) => Step::Retry(pause),
            Next::RequestQuiet { quiet, retry_after } => {
                self.live.quiet.request(Why::WindowQuietPoint, quiet, &format!("{} failing for most of a liveness window: {error}", self.op));
                Step::QuietStarted(retry_after)
            }
            Next::Expired { elapsed, .. } => Step::Expired(elapsed),
        }
    }

    /// Records a failure and waits before the next try. Returns false when the window ran
    /// out (reported as a failure of the window's property, if it has one); the caller
    /// opens a new one to keep trying.
    pub async fn failed(&mut self, error: &str, cancel: &CancellationToken) -> bool {
        let pause = match self.step(error) {
            Step::Retry(p) | Step::QuietStarted(p) => p,
            Step::Expired(elapsed) => {
                if let Some(p) = self.property.filter(|_| self.reports) {
                    let alone_for = self.same_error.as_ref().map_or(Duration::ZERO, |(_, since)| self.live.now().saturating_sub(*since));
                    window_verdict!(p, false, &json!({
                        "op": self.op, "elapsed_s": elapsed.as_secs_f64(), "failures": self.window.failures(), "last_error": error,
                        "last_error_alone_s": alone_for.as_secs_f64(), "quiet_s": self.live.cfg.quiet.as_secs_f64() }));
                }
                self.undecided = false;
                return false;
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = tokio::time::sleep(pause) => {}
        }
        true
    }

    /// The operation made progress: the window starts over.
    pub fn progressed(&mut self) {
        self.window.progressed(self.live.now());
    }

    pub fn elapsed(&self) -> Duration {
        self.window.elapsed(self.live.now())
    }

    /// The operation succeeded inside the window.
    pub fn succeeded(mut self) {
        if let Some(p) = self.property.filter(|_| self.reports) {
            window_verdict!(p, true, &json!({ "op": self.op, "elapsed_s": self.elapsed().as_secs_f64(), "failures": self.window.failures() }));
        }
        self.undecided = false;
    }

    /// Its caller decided the question (and reported the outcome itself).
    pub fn decided(mut self) {
        self.undecided = false;
    }

    /// The window ran out and its caller reported that; it ends here.
    pub fn expired(self) {
        self.decided()
    }
}

impl Drop for OpenWindow<'_> {
    fn drop(&mut self) {
        let Some(property) = self.property.filter(|_| self.undecided) else { return };
        let now = self.live.now();
        let left = LeftOpen { property, op: self.op, opened_s: now.saturating_sub(self.window.elapsed(now)).as_secs_f64(), left_s: now.as_secs_f64(), failures: self.window.failures() };
        tracing::debug!(?left, "a liveness window was left open");
        self.live.left_open.lock().unwrap_or_else(|p| p.into_inner()).push(left);
    }
}
