//! The run's history of judgments. Every evaluation of a property ends here as held,
//! failed or unknown (a `sometimes` that did not happen this time is neither), and the
//! report is a fold over it ([`counts`]): so is `workload check`, over what report.json kept
//! of it. Bounded for a run of any length: counts per property and the first
//! [`KEPT_FAILURES`] failures and unknowns with their details and time, never one entry per
//! message. The Antithesis SDK is the history's other subscriber: the `sdk` macros record
//! an evaluation here first, and [`record`] says what the SDK has not yet been told.

use properties::{Kind, Property};
pub use properties::verdict::Counts;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Per-property counts, indexed by `Property::index()`.
struct History {
    held: Vec<AtomicU64>,
    failed: Vec<AtomicU64>,
    unknown: Vec<AtomicU64>,
    /// The first [`KEPT_FAILURES`] failures: seconds from the run's start, and details.
    failures: Mutex<Vec<Vec<(f64, Value)>>>,
    /// The first [`KEPT_FAILURES`] unknowns' details.
    unknowns: Mutex<Vec<Vec<Value>>>,
}

static STARTED: std::sync::LazyLock<std::time::Instant> = std::sync::LazyLock::new(std::time::Instant::now);
/// When the run began (its drivers' clock, which the fault log and the timeline use too);
/// until then, the process's start.
static RUN_STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// First failures are timed from `at` on (the run's start), like faults and the timeline.
pub fn mark_run_started(at: std::time::Instant) {
    let _ = RUN_STARTED.set(at);
}

/// Starts the clock first failures are timed by until the run starts: the process's start.
pub fn start_clock() {
    std::sync::LazyLock::force(&STARTED);
}

static HISTORY: std::sync::LazyLock<History> = std::sync::LazyLock::new(|| {
    let n = Property::ALL.len();
    History {
        held: (0..n).map(|_| AtomicU64::new(0)).collect(),
        failed: (0..n).map(|_| AtomicU64::new(0)).collect(),
        unknown: (0..n).map(|_| AtomicU64::new(0)).collect(),
        failures: Mutex::new(vec![Vec::new(); n]),
        unknowns: Mutex::new(vec![Vec::new(); n]),
    }
});

/// Failures kept per property with their details (the count goes on beyond): enough to
/// tell whether each is a known server issue, bounded for a run of any length.
pub const KEPT_FAILURES: usize = 8;

/// What the history holds of `p` (the first [`KEPT_FAILURES`] failures timed from
/// [`mark_run_started`], and unknowns).
pub fn counts(p: Property) -> Counts {
    Counts {
        held: HISTORY.held[p.index()].load(Relaxed),
        failed: HISTORY.failed[p.index()].load(Relaxed),
        unknown: HISTORY.unknown[p.index()].load(Relaxed),
        failures: HISTORY.failures.lock().map(|f| f[p.index()].clone()).unwrap_or_default(),
        unknowns: HISTORY.unknowns.lock().map(|f| f[p.index()].clone()).unwrap_or_default(),
    }
}

/// Number of verdict-deciding failures so far (for progress lines).
pub fn failures_so_far() -> u64 {
    Property::ALL.iter().filter(|p| p.decides_verdict()).map(|p| HISTORY.failed[p.index()].load(Relaxed)).sum()
}

/// One evaluation: a condition, or a value against the threshold it should sometimes pass
/// (numeric guidance: Antithesis sees how close each evaluation came).
#[derive(Clone, Copy, Debug)]
pub enum Eval {
    Cond(bool),
    Above { value: u64, threshold: u64 },
}

impl Eval {
    #[doc(hidden)]
    pub fn holds(self) -> bool {
        match self {
            Eval::Cond(c) => c,
            Eval::Above { value, threshold } => value > threshold,
        }
    }

    #[doc(hidden)]
    pub fn numbers(self) -> (u64, u64) {
        match self {
            Eval::Cond(c) => (c as u64, 0),
            Eval::Above { value, threshold } => (value, threshold),
        }
    }
}

tokio::task_local! {
    /// The stream the current task works on, when a run drives several: failures and
    /// unknowns name it in their details.
    static STREAM: String;
}

/// Runs `f` as work on `stream`: what it reports failed or unknown names the stream.
pub fn on_stream<F: std::future::Future>(stream: String, f: F) -> impl std::future::Future<Output = F::Output> {
    STREAM.scope(stream, f)
}

/// `details` with the current task's stream added (an object without a "stream" field, or
/// null); unchanged outside [`on_stream`].
fn naming_stream(details: &Value) -> Cow<'_, Value> {
    let Ok(stream) = STREAM.try_with(Clone::clone) else { return Cow::Borrowed(details) };
    match details {
        Value::Null => Cow::Owned(serde_json::json!({ "stream": stream })),
        Value::Object(m) if !m.contains_key("stream") => {
            let mut m = m.clone();
            m.insert("stream".into(), Value::String(stream));
            Cow::Owned(Value::Object(m))
        }
        _ => Cow::Borrowed(details),
    }
}

/// Records one evaluation and says what the SDK, its other subscriber, must be sent:
/// `None` for a pass of a call site that already sent one (`pass_sent`), since the SDK
/// emits only a call site's first pass and the reader evaluates three properties per
/// message. Numeric guidance always goes: each value is news to Antithesis. Failures name
/// the current stream (see [`on_stream`]).
#[doc(hidden)]
pub fn record<'a>(p: Property, e: Eval, details: &'a Value, pass_sent: &AtomicBool) -> Option<Cow<'a, Value>> {
    let held = e.holds();
    let failed = match p.kind() {
        Kind::Always | Kind::Eventually => !held,
        Kind::Unreachable => held,
        Kind::Sometimes | Kind::Reachable => false,
    };
    if !failed {
        if held {
            HISTORY.held[p.index()].fetch_add(1, Relaxed);
        }
        // Load before swap: a pass repeats for every message, from several threads, and a
        // plain load leaves the flag's cache line shared instead of bouncing it between cores.
        let repeat_pass = held && matches!(e, Eval::Cond(_)) && (pass_sent.load(Relaxed) || pass_sent.swap(true, Relaxed));
        return (!repeat_pass).then_some(Cow::Borrowed(details));
    }
    let details = naming_stream(details);
    let n = HISTORY.failed[p.index()].fetch_add(1, Relaxed);
    if n < KEPT_FAILURES as u64 {
        let origin = RUN_STARTED.get().copied().unwrap_or(*STARTED);
        let t = std::time::Instant::now().saturating_duration_since(origin).as_secs_f64();
        if let Ok(mut f) = HISTORY.failures.lock() {
            f[p.index()].push((t, details.as_ref().clone()));
        }
    }
    // The first few of each property in full, then a sample, so a flood stays readable.
    if n < 5 || n.is_power_of_two() {
        tracing::error!(property = p.id(), failures = n + 1, details = %details.as_ref(), "PROPERTY FAILED");
    }
    Some(details)
}

/// A question of `p` could not be answered at all (no answer for a whole liveness window,
/// a check that could not run to its end): neither held nor failed. The run's verdict is
/// then "unknown" unless something failed. Nothing goes to the SDK: it knows two outcomes.
pub fn unknown(p: Property, details: &Value) {
    let details = naming_stream(details);
    let details = details.as_ref();
    let n = HISTORY.unknown[p.index()].fetch_add(1, Relaxed);
    if n < KEPT_FAILURES as u64 {
        if let Ok(mut f) = HISTORY.unknowns.lock() {
            f[p.index()].push(details.clone());
        }
    }
    tracing::warn!(property = p.id(), %details, "could not be judged (unknown)");
}
