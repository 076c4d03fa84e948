//! The only module that calls the Antithesis SDK.
//!
//! Every property gets exactly one assertion call site, generated from the catalog, so the
//! message (the property's identity) is always the catalog's constant. Each evaluation is
//! also tallied here, because the SDK emits only the first pass and first failure of a call
//! site; the tally feeds `report.json`.

use properties::{for_each_property, Kind, Property, Violation};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Per-property counts, indexed by `Property::index()`.
pub struct Tally {
    held: Vec<AtomicU64>,
    failed: Vec<AtomicU64>,
    unknown: Vec<AtomicU64>,
    /// The first [`KEPT_FAILURES`] failures: seconds from the run's start, and details.
    failures: Mutex<Vec<Vec<(f64, Value)>>>,
    /// The first [`KEPT_FAILURES`] unknowns' details.
    unknowns: Mutex<Vec<Vec<Value>>>,
    /// A pass (or a hit) of the property went to the SDK: it emits only a call site's first
    /// pass, so later passes need not reach it (the reader holds three properties per
    /// message). Numeric guidance always goes: each value is news to Antithesis.
    passed: Vec<std::sync::atomic::AtomicBool>,
}

static STARTED: std::sync::LazyLock<std::time::Instant> = std::sync::LazyLock::new(std::time::Instant::now);
/// When the run began (its drivers' clock, which the fault log and the timeline use too);
/// until then, the process's start.
static RUN_STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// First failures are timed from `at` on (the run's start), like faults and the timeline.
pub fn mark_run_started(at: std::time::Instant) {
    let _ = RUN_STARTED.set(at);
}

static TALLY: std::sync::LazyLock<Tally> = std::sync::LazyLock::new(|| {
    let n = Property::ALL.len();
    Tally {
        held: (0..n).map(|_| AtomicU64::new(0)).collect(),
        failed: (0..n).map(|_| AtomicU64::new(0)).collect(),
        unknown: (0..n).map(|_| AtomicU64::new(0)).collect(),
        failures: Mutex::new(vec![Vec::new(); n]),
        unknowns: Mutex::new(vec![Vec::new(); n]),
        passed: (0..n).map(|_| std::sync::atomic::AtomicBool::new(false)).collect(),
    }
});

/// Failures kept per property with their details (the count goes on beyond): enough to
/// tell whether each is a known server issue, bounded for a run of any length.
pub const KEPT_FAILURES: usize = 8;

/// Counts of one property, for the report.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub held: u64,
    pub failed: u64,
    /// Times the question could not be answered at all (see [`unknown`]).
    pub unknown: u64,
    /// The first [`KEPT_FAILURES`] failures: seconds from the run's start (see
    /// [`mark_run_started`]) and details.
    pub failures: Vec<(f64, Value)>,
    /// The first [`KEPT_FAILURES`] unknowns' details.
    pub unknowns: Vec<Value>,
}

impl Counts {
    pub fn first_failure(&self) -> Option<&Value> {
        self.failures.first().map(|(_, d)| d)
    }

    pub fn first_failure_s(&self) -> Option<f64> {
        self.failures.first().map(|(t, _)| *t)
    }

    pub fn first_unknown(&self) -> Option<&Value> {
        self.unknowns.first()
    }
}

pub fn counts(p: Property) -> Counts {
    Counts {
        held: TALLY.held[p.index()].load(Relaxed),
        failed: TALLY.failed[p.index()].load(Relaxed),
        unknown: TALLY.unknown[p.index()].load(Relaxed),
        failures: TALLY.failures.lock().map(|f| f[p.index()].clone()).unwrap_or_default(),
        unknowns: TALLY.unknowns.lock().map(|f| f[p.index()].clone()).unwrap_or_default(),
    }
}

/// Number of verdict-deciding failures so far (for progress lines).
pub fn failures_so_far() -> u64 {
    Property::ALL.iter().filter(|p| p.decides_verdict()).map(|p| TALLY.failed[p.index()].load(Relaxed)).sum()
}

macro_rules! emit_one {
    (always, $e:expr, $msg:expr, $details:expr) => { antithesis_sdk::assert_always!($e.holds(), $msg, $details) };
    (always_or_unreachable, $e:expr, $msg:expr, $details:expr) => { antithesis_sdk::assert_always_or_unreachable!($e.holds(), $msg, $details) };
    (eventually, $e:expr, $msg:expr, $details:expr) => { antithesis_sdk::assert_always!($e.holds(), $msg, $details) };
    (eventually_or_unreachable, $e:expr, $msg:expr, $details:expr) => { antithesis_sdk::assert_always_or_unreachable!($e.holds(), $msg, $details) };
    (sometimes, $e:expr, $msg:expr, $details:expr) => { antithesis_sdk::assert_sometimes!($e.holds(), $msg, $details) };
    (sometimes_greater, $e:expr, $msg:expr, $details:expr) => {{
        let (value, threshold) = $e.numbers();
        antithesis_sdk::assert_sometimes_greater_than!(value, threshold, $msg, $details)
    }};
    // Never reached under Antithesis: tallied for the report only.
    (sometimes_local, $e:expr, $msg:expr, $details:expr) => {{
        let _ = (&$e, $msg, $details);
    }};
    (reachable, $e:expr, $msg:expr, $details:expr) => { if $e.holds() { antithesis_sdk::assert_reachable!($msg, $details) } };
    (unreachable, $e:expr, $msg:expr, $details:expr) => { if $e.holds() { antithesis_sdk::assert_unreachable!($msg, $details) } };
}

/// One evaluation: a condition, or a value against the threshold it should sometimes pass
/// (numeric guidance: Antithesis sees how close each evaluation came).
#[derive(Clone, Copy, Debug)]
pub enum Eval {
    Cond(bool),
    Above { value: u64, threshold: u64 },
}

impl Eval {
    fn holds(self) -> bool {
        match self {
            Eval::Cond(c) => c,
            Eval::Above { value, threshold } => value > threshold,
        }
    }

    fn numbers(self) -> (u64, u64) {
        match self {
            Eval::Cond(c) => (c as u64, 0),
            Eval::Above { value, threshold } => (value, threshold),
        }
    }
}

macro_rules! define_emit {
    ($( ($variant:ident, $kind:ident, $id:literal, $sentence:literal) )*) => {
        /// One SDK call site per property; the evaluation is "held" for always/eventually/
        /// sometimes and "reached" for reachable/unreachable.
        fn emit(p: Property, e: Eval, details: &Value) {
            match p {
                $( Property::$variant => emit_one!($kind, e, Property::$variant.message(), details), )*
            }
        }
    };
}

for_each_property!(define_emit);

/// Evaluates a property: `held` is whether it held (always, eventually, sometimes) or was
/// reached (reachable, unreachable).
pub fn check(p: Property, held: bool, details: &Value) {
    evaluate(p, Eval::Cond(held), details);
}

/// Evaluates a numeric-guidance property: did `value` pass `threshold` this time?
pub fn above(p: Property, value: u64, threshold: u64, details: &Value) {
    evaluate(p, Eval::Above { value, threshold }, details);
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
fn naming_stream(details: &Value) -> std::borrow::Cow<'_, Value> {
    let Ok(stream) = STREAM.try_with(Clone::clone) else { return std::borrow::Cow::Borrowed(details) };
    match details {
        Value::Null => std::borrow::Cow::Owned(serde_json::json!({ "stream": stream })),
        Value::Object(m) if !m.contains_key("stream") => {
            let mut m = m.clone();
            m.insert("stream".into(), Value::String(stream));
            std::borrow::Cow::Owned(Value::Object(m))
        }
        _ => std::borrow::Cow::Borrowed(details),
    }
}

fn evaluate(p: Property, e: Eval, details: &Value) {
    let held = e.holds();
    let failed = match p.kind() {
        Kind::Always | Kind::Eventually => !held,
        Kind::Unreachable => held,
        Kind::Sometimes | Kind::Reachable => false,
    };
    // Only failures carry the stream: a pass is emitted once per property, and this runs
    // for every message.
    let details = if failed { naming_stream(details) } else { std::borrow::Cow::Borrowed(details) };
    let details = details.as_ref();
    // Load before swap: a pass repeats for every message, from several threads, and a plain
    // load leaves the flag's cache line shared instead of bouncing it between cores.
    let passed = &TALLY.passed[p.index()];
    let repeat_pass = held && !failed && matches!(e, Eval::Cond(_)) && (passed.load(Relaxed) || passed.swap(true, Relaxed));
    if !repeat_pass {
        emit(p, e, details);
    }
    if failed {
        let n = TALLY.failed[p.index()].fetch_add(1, Relaxed);
        if n < KEPT_FAILURES as u64 {
            let origin = RUN_STARTED.get().copied().unwrap_or(*STARTED);
            let t = std::time::Instant::now().saturating_duration_since(origin).as_secs_f64();
            if let Ok(mut f) = TALLY.failures.lock() {
                f[p.index()].push((t, details.clone()));
            }
        }
        // The first few of each property in full, then a sample, so a flood stays readable.
        if n < 5 || n.is_power_of_two() {
            tracing::error!(property = p.id(), failures = n + 1, %details, "PROPERTY FAILED");
        }
    } else if held {
        TALLY.held[p.index()].fetch_add(1, Relaxed);
    }
}

/// A question of `p` could not be answered at all (no answer for a whole liveness window,
/// a check that could not run to its end): neither held nor failed. The run's verdict is
/// then "unknown" unless something failed. Nothing goes to the SDK: it knows two outcomes.
pub fn unknown(p: Property, details: &Value) {
    let details = naming_stream(details);
    let details = details.as_ref();
    let n = TALLY.unknown[p.index()].fetch_add(1, Relaxed);
    if n < KEPT_FAILURES as u64 {
        if let Ok(mut f) = TALLY.unknowns.lock() {
            f[p.index()].push(details.clone());
        }
    }
    tracing::warn!(property = p.id(), %details, "could not be judged (unknown)");
}

/// The property held (or the path was reached); no details.
pub fn hold(p: Property) {
    check(p, true, &Value::Null);
}

pub fn violation(v: &Violation) {
    check(v.property, false, &v.details);
}

/// Starts the SDK. Must run before any other thread exists: it may set the variable that
/// points the SDK's local output at `sdk_jsonl`.
pub fn init(sdk_jsonl: Option<&std::path::Path>) {
    if let Some(path) = sdk_jsonl {
        if std::env::var_os("ANTITHESIS_SDK_LOCAL_OUTPUT").is_none() {
            std::env::set_var("ANTITHESIS_SDK_LOCAL_OUTPUT", path);
        }
    }
    antithesis_sdk::antithesis_init();
    std::sync::LazyLock::force(&STARTED);
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        check(Property::WorkloadNeverPanics, true, &serde_json::json!({ "panic": info.to_string() }));
        default_hook(info);
    }));
}

/// `setup_complete`, once per process.
pub fn setup_complete(details: &Value) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        antithesis_sdk::lifecycle::setup_complete(details);
        hold(Property::SetupCompleted);
    });
}
