//! What the operations did: each kind's counts, those never sent and why, and
//! `operations.jsonl` (every request and settle as it happens).

use properties::operations::OpKind;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

/// How often each operation was drawn and what became of it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OpCounts {
    /// Accepted by the server.
    pub done: u64,
    /// Refused by the server for a reason that retrying does not change (no suitable or
    /// spare peer, a move already in progress, nothing to cancel, ...).
    pub refused: u64,
    /// Drawn but not applicable right now (no other placement fits, no spare server).
    pub not_applicable: u64,
    /// Waited for and seen settled.
    pub settled: u64,
    /// Seen settled with the operation's effect: another leader after a stepdown, other
    /// peers after a move or removal.
    pub effect_seen: u64,
    /// Waited for, settled, and found undone by a later removal of another of the
    /// stream's servers (a membership fault): the server's later change wins.
    pub superseded: u64,
}

/// A request as the outage meter sees it: its number, stream, kind and when.
type Request = (u64, String, OpKind, Instant);

/// Every operation's counts, and those never sent with why.
#[derive(Default)]
pub struct OpTally {
    counts: Mutex<BTreeMap<OpKind, OpCounts>>,
    skipped: Mutex<BTreeMap<OpKind, String>>,
    /// Where every request and settle goes as it happens (`operations.jsonl`), with the
    /// run's start: faults have their times in faults.jsonl, and a failure is read against both.
    log: std::sync::OnceLock<(std::path::PathBuf, Instant)>,
    /// When an operation was last requested on each stream.
    last_request: Mutex<BTreeMap<String, Instant>>,
    /// The latest requests (numbered from 0, the last [`REQUESTS_KEPT`]), for the outage meter.
    requests: Mutex<(u64, std::collections::VecDeque<Request>)>,
    /// The latest peer removals (stream, consumer, or a server's evacuation): stream,
    /// operation, the server named, when. The durable judge reads them: removing the only
    /// server of a single-replica consumer drops its state on purpose.
    removals: Mutex<std::collections::VecDeque<(String, OpKind, String, Instant)>>,
}

/// Requests kept for readers that look now and then (the outage meter, four times a second).
const REQUESTS_KEPT: usize = 256;

impl OpTally {
    /// Writes each event to `path` from now on, timed from `origin`.
    pub fn log_to(&self, path: std::path::PathBuf, origin: Instant) {
        let _ = std::fs::remove_file(&path);
        let _ = self.log.set((path, origin));
    }

    /// One event of `op` on `stream`: requested (what was asked), refused (why),
    /// settled (the peers before and after), requested-again, waiting-for-move.
    pub fn record(&self, stream: &str, op: OpKind, event: &str, detail: Value) {
        tracing::info!(op = op.id(), %stream, %detail, "operation {event}");
        if event == "requested" {
            if let Ok(mut m) = self.last_request.lock() {
                m.insert(stream.to_string(), Instant::now());
            }
            let removes = matches!(op, OpKind::PeerRemove | OpKind::ConsumerPeerRemove);
            if let (true, Some(peer), Ok(mut r)) = (removes, detail["peer"].as_str(), self.removals.lock()) {
                r.push_back((stream.to_string(), op, peer.to_string(), Instant::now()));
                if r.len() > REQUESTS_KEPT {
                    r.pop_front();
                }
            }
            // A request that changes nothing owns no outage.
            if let (false, Ok(mut r)) = (properties::operations::changes_nothing(&detail), self.requests.lock()) {
                let n = r.0;
                r.0 += 1;
                r.1.push_back((n, stream.to_string(), op, Instant::now()));
                if r.1.len() > REQUESTS_KEPT {
                    r.1.pop_front();
                }
            }
        }
        let Some((path, origin)) = self.log.get() else { return };
        crate::logs::append_json_line(path, &json!({ "t_s": origin.elapsed().as_secs_f64(), "event": event, "op": op.id(), "stream": stream, "detail": detail }));
    }

    /// A peer removal (the stream's or its consumer's) of `server` on `stream` requested at
    /// or after `since`: which, and when.
    pub fn removed_since(&self, stream: &str, server: &str, since: Instant) -> Option<(OpKind, Instant)> {
        let r = self.removals.lock().ok()?;
        r.iter().find(|(s, _, peer, t)| s == stream && peer == server && *t >= since).map(|(_, op, _, t)| (*op, *t))
    }

    /// When an operation was last requested on `stream`.
    pub fn last_request(&self, stream: &str) -> Option<Instant> {
        self.last_request.lock().ok()?.get(stream).copied()
    }

    /// Requests on `stream` numbered from `*next` on (and moves `*next` past every request seen).
    pub fn requests_since(&self, stream: &str, next: &mut u64) -> Vec<(OpKind, Instant)> {
        let Ok(r) = self.requests.lock() else { return Vec::new() };
        let out = r.1.iter().filter(|(n, s, _, _)| *n >= *next && s == stream).map(|(_, _, op, t)| (*op, *t)).collect();
        *next = r.0;
        out
    }

    pub fn count(&self, op: OpKind, f: impl FnOnce(&mut OpCounts)) {
        if let Ok(mut m) = self.counts.lock() {
            f(m.entry(op).or_default());
        }
    }

    /// `op` is never sent in this run, for `why` (the server lacks it, ...).
    pub fn skip(&self, op: OpKind, why: String) {
        if let Ok(mut m) = self.skipped.lock() {
            m.insert(op, why);
        }
    }

    pub fn skipped(&self, op: OpKind) -> bool {
        self.skipped.lock().is_ok_and(|m| m.contains_key(&op))
    }

    /// How often `op` was drawn when it could not act.
    pub fn not_applicable(&self, op: OpKind) -> u64 {
        self.counts.lock().map(|m| m.get(&op).map_or(0, |c| c.not_applicable)).unwrap_or(0)
    }

    pub fn to_json(&self) -> Value {
        let counts = self.counts.lock().map(|m| m.iter().map(|(k, v)| (k.id().to_string(), json!(v))).collect::<serde_json::Map<_, _>>()).unwrap_or_default();
        let skipped = self.skipped.lock().map(|m| m.iter().map(|(k, v)| (k.id().to_string(), json!(v))).collect::<serde_json::Map<_, _>>()).unwrap_or_default();
        json!({ "counts": counts, "skipped": skipped })
    }
}
