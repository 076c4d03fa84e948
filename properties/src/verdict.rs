//! From what was recorded of each property to its status and the run's verdict: the judges
//! of `report.json`, shared by the run's own report and `workload check DIR`, and the typed
//! row each property gets in the report.

use crate::{Kind, Property};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What was recorded of one property: how often it held, failed and could not be judged,
/// with the first failures (seconds from the run's start, details) and unknowns kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    pub held: u64,
    pub failed: u64,
    /// Times the question could not be answered at all.
    pub unknown: u64,
    pub failures: Vec<(f64, Value)>,
    pub unknowns: Vec<Value>,
}

/// A property's status in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Passed,
    Failed,
    Unknown,
    NotReached,
}

/// The run's verdict (Jepsen's valid? true / false / unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Unknown,
}

/// A property that held wherever it was judged but could not be judged somewhere is
/// unknown, not passed; coverage that never held was not reached.
pub fn status(p: Property, c: &Counts) -> Status {
    match p.kind() {
        Kind::Always | Kind::Eventually | Kind::Unreachable if c.failed > 0 => Status::Failed,
        Kind::Always | Kind::Eventually if c.unknown > 0 => Status::Unknown,
        Kind::Unreachable => Status::Passed,
        _ if c.held > 0 => Status::Passed,
        _ => Status::NotReached,
    }
}

/// Fail when a deciding property failed, else unknown when one could not be judged, else
/// pass. Coverage properties decide nothing.
pub fn verdict(statuses: &[(Property, Status)]) -> Verdict {
    let deciding = || statuses.iter().filter(|(p, _)| p.decides_verdict());
    if deciding().any(|(_, s)| *s == Status::Failed) {
        Verdict::Fail
    } else if deciding().any(|(_, s)| *s == Status::Unknown) {
        Verdict::Unknown
    } else {
        Verdict::Pass
    }
}

/// One kept failure in the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FailureRow {
    pub t_s: f64,
    pub details: Value,
}

/// What was tallied of a property, as its row in `report.json` records it: the counts and
/// the kept failures and unknowns. Everything else in a row is derived from these, so they
/// are what `workload check` reads back; a field a saved row lacks (a trimmed fixture, an
/// older build) reads as empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tallied {
    pub held: u64,
    pub failed: u64,
    pub unknown: u64,
    pub unknowns: Vec<Value>,
    pub failures: Vec<FailureRow>,
}

impl Tallied {
    fn of(c: &Counts) -> Self {
        Tallied {
            held: c.held,
            failed: c.failed,
            unknown: c.unknown,
            unknowns: c.unknowns.clone(),
            failures: c.failures.iter().map(|(t, d)| FailureRow { t_s: tenths(*t), details: d.clone() }).collect(),
        }
    }

    pub fn counts(&self) -> Counts {
        Counts {
            held: self.held,
            failed: self.failed,
            unknown: self.unknown,
            failures: self.failures.iter().map(|f| (f.t_s, f.details.clone())).collect(),
            unknowns: self.unknowns.clone(),
        }
    }
}

/// A property's row in `report.json` (known issues add `known` to it afterwards).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PropertyRow {
    pub id: String,
    pub kind: Kind,
    pub message: String,
    pub status: Status,
    #[serde(flatten)]
    pub tallied: Tallied,
    pub first_failure: Option<Value>,
    pub first_failure_s: Option<f64>,
    pub first_unknown: Option<Value>,
}

/// A saved row read back to be judged again: its property and what was tallied of it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Recorded {
    pub id: String,
    #[serde(flatten)]
    pub tallied: Tallied,
}

fn tenths(s: f64) -> f64 {
    (s * 10.0).round() / 10.0
}

impl PropertyRow {
    pub fn new(p: Property, c: &Counts) -> Self {
        PropertyRow {
            id: p.id().to_string(),
            kind: p.kind(),
            message: p.message().to_string(),
            status: status(p, c),
            tallied: Tallied::of(c),
            first_failure: c.failures.first().map(|(_, d)| d.clone()),
            first_failure_s: c.failures.first().map(|(t, _)| tenths(*t)),
            first_unknown: c.unknowns.first().cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn counts(held: u64, failed: u64, unknown: u64) -> Counts {
        Counts { held, failed, unknown, ..Default::default() }
    }

    #[test]
    fn an_unanswered_question_is_unknown_never_passed() {
        let safety = Property::AckedMessageNeverLost;
        assert_eq!(status(safety, &counts(10, 0, 0)), Status::Passed);
        assert_eq!(status(safety, &counts(10, 0, 1)), Status::Unknown, "held elsewhere does not answer it");
        assert_eq!(status(safety, &counts(10, 1, 1)), Status::Failed);
        assert_eq!(status(Property::ConsumerRecreated, &counts(0, 0, 0)), Status::NotReached);
        let p = Property::ReplicasAgree;
        assert_eq!(verdict(&[(safety, Status::Passed), (p, Status::NotReached)]), Verdict::Pass);
        assert_eq!(verdict(&[(safety, Status::Unknown), (p, Status::Passed)]), Verdict::Unknown);
        assert_eq!(verdict(&[(safety, Status::Unknown), (p, Status::Failed)]), Verdict::Fail);
        assert_eq!(verdict(&[(safety, Status::Passed), (Property::ConsumerRecreated, Status::Unknown)]), Verdict::Pass, "coverage decides nothing");
    }

    #[test]
    fn a_row_keeps_the_report_json_shape_and_reads_back_its_counts() {
        let c = Counts { held: 3, failed: 2, unknown: 0, failures: vec![(1.26, json!({ "seq": 4 })), (2.0, json!({ "seq": 9 }))], unknowns: vec![] };
        let row = PropertyRow::new(Property::AckedMessageNeverLost, &c);
        let v = serde_json::to_value(&row).unwrap();
        assert_eq!(v["id"], "acked-message-never-lost");
        assert_eq!(v["kind"], "always");
        assert_eq!(v["status"], "failed");
        assert_eq!(v["first_failure"], json!({ "seq": 4 }));
        assert_eq!(v["first_failure_s"], json!(1.3));
        assert_eq!(v["first_unknown"], Value::Null);
        assert_eq!(v["failures"][1], json!({ "t_s": 2.0, "details": { "seq": 9 } }));
        let mut saved = v.clone();
        saved["known"] = json!(["some-issue"]);
        let back: Recorded = serde_json::from_value(saved).unwrap();
        assert_eq!(back.tallied.counts(), Counts { unknowns: vec![], failures: vec![(1.3, json!({ "seq": 4 })), (2.0, json!({ "seq": 9 }))], ..c });
        let trimmed: Recorded = serde_json::from_value(json!({ "id": "x", "failed": 1, "failures": [{ "t_s": 3.0 }] })).unwrap();
        assert_eq!(trimmed.tallied.counts(), Counts { failed: 1, failures: vec![(3.0, Value::Null)], ..Counts::default() }, "what a row lacks reads as empty");
        assert_eq!(serde_json::to_value(Status::NotReached).unwrap(), "not-reached");
        assert_eq!(serde_json::to_value(Verdict::Unknown).unwrap(), "unknown");
    }
}
