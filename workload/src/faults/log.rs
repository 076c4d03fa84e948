//! The fault log: every fault's start and end with its targets (and their roles at the
//! start), kept for the report and written to `faults.jsonl`.

use crate::config::FaultKind;
use crate::nats::view::Role;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// One line of the fault log.
#[derive(Clone, Debug, Serialize)]
pub struct FaultEvent {
    /// Seconds since the run started.
    pub t_s: f64,
    pub event: &'static str,
    pub kind: FaultKind,
    pub nodes: Vec<String>,
    /// The struck nodes' roles when the fault started (start events).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<String, Vec<Role>>,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

/// What happened, shared with the report.
#[derive(Default)]
pub struct FaultLog {
    pub events: Mutex<Vec<FaultEvent>>,
    file: Option<PathBuf>,
}

impl FaultLog {
    pub fn new(file: Option<PathBuf>) -> Self {
        if let Some(f) = &file {
            let _ = std::fs::remove_file(f);
        }
        Self { events: Mutex::default(), file }
    }

    pub(crate) fn record(&self, e: FaultEvent) {
        tracing::info!(t_s = format!("{:.1}", e.t_s), kind = ?e.kind, nodes = ?e.nodes, detail = %e.detail, "fault {}", e.event);
        if let Some(path) = &self.file {
            crate::logs::append_json_line(path, &e);
        }
        if let Ok(mut events) = self.events.lock() {
            events.push(e);
        }
    }

    /// Starts per fault type and per role struck, and every event, for the report.
    pub fn summary(&self) -> Value {
        let events = self.events.lock().map(|e| e.clone()).unwrap_or_default();
        let name = |v: Value| v.as_str().map(str::to_string).unwrap_or_default();
        let mut roles: BTreeMap<String, u64> = BTreeMap::new();
        for e in events.iter().filter(|e| e.event == "start") {
            for role in e.roles.values().flatten() {
                *roles.entry(name(json!(role))).or_default() += 1;
            }
            if e.roles.values().all(Vec::is_empty) {
                *roles.entry("bystander".into()).or_default() += 1;
            }
        }
        json!({ "starts": self.starts_by_kind(), "roles_struck": roles, "events": events })
    }

    /// Fault starts per kind.
    pub fn starts_by_kind(&self) -> BTreeMap<String, u64> {
        let mut starts = BTreeMap::new();
        for e in self.events.lock().iter().flat_map(|e| e.iter()).filter(|e| e.event == "start") {
            *starts.entry(json!(e.kind).as_str().unwrap_or_default().to_string()).or_default() += 1;
        }
        starts
    }

    /// The servers membership faults have removed from the meta group so far (their names
    /// before they rejoined under new ones), oldest first.
    pub fn servers_removed(&self) -> Vec<String> {
        // Read under the lock, as `starts` does: the operator asks at every settle look, and a
        // long run's log is long.
        let removed = |e: &FaultEvent| if e.event == "start" && e.kind == FaultKind::Membership { e.detail["removed"].as_str().map(str::to_string) } else { None };
        self.events.lock().map(|events| events.iter().filter_map(removed).collect()).unwrap_or_default()
    }

    pub fn starts(&self) -> usize {
        self.events.lock().map(|e| e.iter().filter(|e| e.event == "start").count()).unwrap_or(0)
    }
}
