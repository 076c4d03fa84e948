//! The only module that calls the Antithesis SDK.
//!
//! A property is evaluated with [`check!`], [`hold!`], [`above!`] or [`violation!`]: macros
//! generated from the catalog that expand the SDK's assertion where they are called, so each
//! call site is an assertion location of its own in Antithesis (grouped by the message, the
//! catalog's constant: the property's identity), and a never-reached one is still in the
//! catalog. A property known only at run time goes through [`check`], from the caller's
//! location too. Each evaluation is also tallied here, because the SDK emits only the first
//! pass and first failure of a call site; the tally feeds `report.json`.

use properties::{for_each_property, Kind, Property};
pub use properties::verdict::Counts;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
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
    passed: Vec<AtomicBool>,
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
        passed: (0..n).map(|_| AtomicBool::new(false)).collect(),
    }
});

/// Failures kept per property with their details (the count goes on beyond): enough to
/// tell whether each is a known server issue, bounded for a run of any length.
pub const KEPT_FAILURES: usize = 8;

/// What the tally recorded of `p` (the first [`KEPT_FAILURES`] failures timed from
/// [`mark_run_started`], and unknowns).
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

/// The SDK call of one evaluation, by the property's kind in the catalog. Expanded at each
/// call site (through [`assert_at!`]), so the catalog and Antithesis show the workload's
/// line, not this file's.
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

/// Generates `assert_at!(Property::X, eval, details)`: one arm per property, each with the
/// property's constant message and kind, expanded where it is called so that every call
/// site is an assertion location of its own (Antithesis groups them by message). A macro
/// generated by a macro needs its `$` handed in as a token: the `@dollar` arm.
macro_rules! define_assert_at {
    (@dollar ($d:tt) $( ($variant:ident, $kind:ident, $id:literal, $sentence:literal) )*) => {
        /// An evaluation of a property, tallied for the report and sent to the SDK from the
        /// caller's source location. Used through [`check!`], [`hold!`], [`above!`],
        /// [`violation!`].
        macro_rules! assert_at {
            $( (Property::$variant, $d eval:expr, $d details:expr) => {{
                // The SDK sends a call site's first pass only; later passes stop here.
                static PASS_SENT: ::std::sync::atomic::AtomicBool = ::std::sync::atomic::AtomicBool::new(false);
                let eval: $crate::sdk::Eval = $d eval;
                if let Some(details) = $crate::sdk::tally(::properties::Property::$variant, eval, $d details, &PASS_SENT) {
                    $crate::sdk::emit_one!($kind, eval, concat!($id, ": ", $sentence), details.as_ref());
                }
            }}; )*
        }

        /// Each property's kind as the catalog spells it (`always_or_unreachable`, ...): the
        /// SDK call of [`evaluate`], which knows the property only at run time.
        fn catalog_kind(p: Property) -> &'static str {
            match p { $( Property::$variant => stringify!($kind), )* }
        }
    };
    ($($rows:tt)*) => { define_assert_at!(@dollar ($) $($rows)*); };
}

for_each_property!(define_assert_at);

/// `check!(Property::X, held, &details)`: `held` is whether it held (always, eventually,
/// sometimes) or was reached (reachable, unreachable). With `p in [Property::A, ...]` for a
/// property known at run time: each listed one gets this call site; another falls back to
/// [`check`].
macro_rules! check {
    (Property::$variant:ident, $held:expr, $details:expr) => {
        $crate::sdk::assert_at!(Property::$variant, $crate::sdk::Eval::Cond($held), $details)
    };
    ($p:expr => [$(Property::$variant:ident),+ $(,)?], $held:expr, $details:expr) => {{
        let (p, held, details): (::properties::Property, bool, &::serde_json::Value) = ($p, $held, $details);
        match p {
            $( ::properties::Property::$variant => $crate::sdk::assert_at!(Property::$variant, $crate::sdk::Eval::Cond(held), details), )+
            _ => $crate::sdk::check_at_run_time(p, held, details),
        }
    }};
}

/// `hold!(Property::X)`: it held (or was reached), with no details.
macro_rules! hold {
    (Property::$variant:ident) => {
        $crate::sdk::check!(Property::$variant, true, &::serde_json::Value::Null)
    };
}

/// `above!(Property::X, value, threshold, &details)`: numeric guidance, did `value` pass
/// `threshold` this time?
macro_rules! above {
    (Property::$variant:ident, $value:expr, $threshold:expr, $details:expr) => {
        $crate::sdk::assert_at!(Property::$variant, $crate::sdk::Eval::Above { value: $value, threshold: $threshold }, $details)
    };
}

/// `violation!(&v, [Property::A, ...])`: a pure checker's failure, from the caller's
/// location; the list names the properties that checker reports (another falls back to
/// [`violation`]).
macro_rules! violation {
    ($v:expr, [$(Property::$variant:ident),+ $(,)?]) => {{
        let v: &::properties::Violation = $v;
        $crate::sdk::check!(v.property => [$(Property::$variant),+], false, &v.details)
    }};
}

pub(crate) use {above, assert_at, check, emit_one, hold, violation};

/// Evaluates a property missing from a [`check!`] list: `held` as in [`check!`]. Reported
/// from the caller's location, without a catalog entry of its own (a property's catalog
/// entries are its [`check!`] call sites). A list that misses a property is a slip: logged.
#[track_caller]
#[doc(hidden)]
pub fn check_at_run_time(p: Property, held: bool, details: &Value) {
    let at = std::panic::Location::caller();
    tracing::warn!(property = p.id(), "evaluated at {at}, whose check! list lacks it");
    evaluate(p, Eval::Cond(held), details);
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

/// Tallies one evaluation for the report and says what the SDK must be sent: `None` for a
/// pass of a call site that already sent one (`pass_sent`), since the SDK emits only a call
/// site's first pass and the reader evaluates three properties per message. Numeric
/// guidance always goes: each value is news to Antithesis. Failures name the current
/// stream (see [`on_stream`]).
#[doc(hidden)]
pub fn tally<'a>(p: Property, e: Eval, details: &'a Value, pass_sent: &AtomicBool) -> Option<Cow<'a, Value>> {
    let held = e.holds();
    let failed = match p.kind() {
        Kind::Always | Kind::Eventually => !held,
        Kind::Unreachable => held,
        Kind::Sometimes | Kind::Reachable => false,
    };
    if !failed {
        if held {
            TALLY.held[p.index()].fetch_add(1, Relaxed);
        }
        // Load before swap: a pass repeats for every message, from several threads, and a
        // plain load leaves the flag's cache line shared instead of bouncing it between cores.
        let repeat_pass = held && matches!(e, Eval::Cond(_)) && (pass_sent.load(Relaxed) || pass_sent.swap(true, Relaxed));
        return (!repeat_pass).then_some(Cow::Borrowed(details));
    }
    let details = naming_stream(details);
    let n = TALLY.failed[p.index()].fetch_add(1, Relaxed);
    if n < KEPT_FAILURES as u64 {
        let origin = RUN_STARTED.get().copied().unwrap_or(*STARTED);
        let t = std::time::Instant::now().saturating_duration_since(origin).as_secs_f64();
        if let Ok(mut f) = TALLY.failures.lock() {
            f[p.index()].push((t, details.as_ref().clone()));
        }
    }
    // The first few of each property in full, then a sample, so a flood stays readable.
    if n < 5 || n.is_power_of_two() {
        tracing::error!(property = p.id(), failures = n + 1, details = %details.as_ref(), "PROPERTY FAILED");
    }
    Some(details)
}

/// An evaluation of a property known only at run time ([`check`], or a property missing
/// from a [`check!`] list): sent with the caller's location through the SDK's raw call,
/// which adds no catalog entry (a property's entries are its [`check!`] sites).
#[track_caller]
fn evaluate(p: Property, e: Eval, details: &Value) {
    let Some(details) = tally(p, e, details, &TALLY.passed[p.index()]) else { return };
    use antithesis_sdk::assert::AssertType::{Always, Reachability, Sometimes};
    let held = e.holds();
    let (assert_type, display, must_hit, condition) = match catalog_kind(p) {
        "always" | "eventually" => (Always, "Always", true, held),
        "always_or_unreachable" | "eventually_or_unreachable" => (Always, "AlwaysOrUnreachable", false, held),
        "sometimes" | "sometimes_greater" => (Sometimes, "Sometimes", true, held),
        "reachable" if held => (Reachability, "Reachable", true, true),
        "unreachable" if held => (Reachability, "Unreachable", false, false),
        _ => return, // not reached, or tallied only (sometimes_local)
    };
    let at = std::panic::Location::caller();
    antithesis_sdk::assert::assert_raw(
        condition,
        p.message().to_string(),
        details.as_ref(),
        module_path!().to_string(),
        "dynamic".to_string(),
        at.file().to_string(),
        at.line(),
        at.column(),
        true,
        must_hit,
        assert_type,
        display.to_string(),
        p.message().to_string(),
    );
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
        check!(Property::WorkloadNeverPanics, true, &serde_json::json!({ "panic": info.to_string() }));
        default_hook(info);
    }));
}

/// `setup_complete`, once per process.
pub fn setup_complete(details: &Value) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        antithesis_sdk::lifecycle::setup_complete(details);
        hold!(Property::SetupCompleted);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use antithesis_sdk::assert::ANTITHESIS_CATALOG;
    use std::collections::{BTreeMap, BTreeSet};

    /// Each property the SDK hears of is catalogued where the workload evaluates it: so
    /// Antithesis lists it even if never reached, at the line that judges it.
    #[test]
    fn every_property_is_catalogued_at_the_lines_that_evaluate_it() {
        let mut sites: BTreeMap<&str, BTreeSet<(&str, u32)>> = BTreeMap::new();
        for entry in ANTITHESIS_CATALOG.iter() {
            sites.entry(entry.message).or_default().insert((entry.file, entry.begin_line));
        }
        // Evaluated in this file because this file is where they happen.
        let here = [Property::WorkloadNeverPanics, Property::SetupCompleted];
        let mut locations = 0;
        for p in Property::ALL {
            let at = sites.get(p.message());
            if catalog_kind(*p) == "sometimes_local" {
                assert!(at.is_none(), "{} is local-only yet catalogued at {at:?}", p.id());
                continue;
            }
            let at = at.unwrap_or_else(|| panic!("{} has no catalogued call site", p.id()));
            locations += at.len();
            for (file, line) in at {
                assert!(
                    !file.ends_with("src/sdk.rs") || here.contains(p),
                    "{} is catalogued in sdk.rs:{line}, not where it is evaluated",
                    p.id()
                );
            }
        }
        let sdk_visible = Property::ALL.iter().filter(|p| catalog_kind(**p) != "sometimes_local").count();
        assert!(locations > sdk_visible, "{locations} locations for {sdk_visible} properties");
        eprintln!("{sdk_visible} properties at {locations} locations");
    }
}
