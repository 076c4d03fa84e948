//! The property report: every catalog property with its status and counts, the run's
//! counters, and the verdict. Written as `report.json` and printed as a table.

pub mod metrics;
pub mod page;
pub mod timeline;

use crate::sdk;
use properties::{Kind, Property};
use serde_json::{json, Value};

/// "passed", "failed", "unknown" or "not-reached", from the tally. A property that held
/// wherever it was judged but could not be judged somewhere is "unknown", not "passed".
pub fn status(p: Property, c: &sdk::Counts) -> &'static str {
    match p.kind() {
        Kind::Always | Kind::Eventually if c.failed > 0 => "failed",
        Kind::Unreachable if c.failed > 0 => "failed",
        Kind::Always | Kind::Eventually if c.unknown > 0 => "unknown",
        Kind::Unreachable => "passed",
        _ if c.held > 0 => "passed",
        _ => "not-reached",
    }
}

/// The run's verdict: "fail" when a deciding property failed, else "unknown" when one could
/// not be judged, else "pass" (Jepsen's valid? true / false / unknown).
pub fn verdict(statuses: &[(Property, &str)]) -> &'static str {
    let deciding = || statuses.iter().filter(|(p, _)| p.decides_verdict());
    if deciding().any(|(_, s)| *s == "failed") {
        "fail"
    } else if deciding().any(|(_, s)| *s == "unknown") {
        "unknown"
    } else {
        "pass"
    }
}

fn tenths(s: f64) -> f64 {
    (s * 10.0).round() / 10.0
}

/// The whole report from this process's tally; `run` carries the run's own facts (seed,
/// ids, counters, versions). Known server issues are marked by [`mark_known`] afterwards.
pub fn build(run: Value) -> Value {
    build_from(Property::ALL.iter().map(|&p| (p, sdk::counts(p))).collect(), run)
}

/// The keys [`build_from`] and [`mark_known`] write: what a re-judgment derives again.
const JUDGED: [&str; 8] = ["verdict", "failed", "unknown", "properties", "known_issues", "unexplained", "unknown_unexplained", "verdict_without_known"];

/// A saved report judged again from what it recorded of each property (its counts, kept
/// failures and unknowns) and its facts alone, with the known-issue table of this build:
/// `workload check DIR`. The same judges as the run's own, so an unchanged table gives the
/// same verdict.
pub fn rejudge(saved: &Value, dir: &std::path::Path) -> Value {
    let recorded = |p: Property| -> sdk::Counts {
        let Some(r) = saved["properties"].as_array().into_iter().flatten().find(|r| r["id"] == p.id()) else { return sdk::Counts::default() };
        let n = |k: &str| r[k].as_u64().unwrap_or(0);
        let failures = r["failures"].as_array().into_iter().flatten().map(|f| (f["t_s"].as_f64().unwrap_or(0.0), f["details"].clone())).collect();
        let unknowns = r["unknowns"].as_array().cloned().unwrap_or_default();
        sdk::Counts { held: n("held"), failed: n("failed"), unknown: n("unknown"), failures, unknowns }
    };
    let mut facts = saved.clone();
    if let Some(f) = facts.as_object_mut() {
        f.retain(|k, _| !JUDGED.contains(&k.as_str()));
    }
    let mut report = build_from(Property::ALL.iter().map(|&p| (p, recorded(p))).collect(), facts);
    mark_known(&mut report, dir);
    report
}

fn build_from(counts: Vec<(Property, sdk::Counts)>, run: Value) -> Value {
    let statuses: Vec<(Property, &str)> = counts.iter().map(|(p, c)| (*p, status(*p, c))).collect();
    let properties: Vec<Value> = counts
        .iter()
        .zip(&statuses)
        .map(|((p, c), (_, status))| {
            json!({
                "id": p.id(), "kind": p.kind(), "message": p.message(), "status": status,
                "held": c.held, "failed": c.failed, "unknown": c.unknown,
                "first_failure": c.first_failure(),
                "first_failure_s": c.first_failure_s().map(tenths), "first_unknown": c.first_unknown(), "unknowns": c.unknowns,
                "failures": c.failures.iter().map(|(t, d)| json!({ "t_s": tenths(*t), "details": d })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let with = |s: &str| -> Vec<&str> { statuses.iter().filter(|(p, st)| p.decides_verdict() && *st == s).map(|(p, _)| p.id()).collect() };
    let mut report = json!({
        "verdict": verdict(&statuses),
        "failed": with("failed"),
        "unknown": with("unknown"),
        "properties": properties,
    });
    if let (Some(r), Some(extra)) = (report.as_object_mut(), run.as_object()) {
        r.extend(extra.clone());
    }
    report
}

/// Marks the failures a known server issue explains ([`properties::known::annotate`]),
/// judged against the run's faults (from the report) and operations (`operations.jsonl` in
/// `dir`, when the run wrote one).
pub fn mark_known(report: &mut Value, dir: &std::path::Path) {
    let faults = report["faults"]["events"].as_array().cloned().unwrap_or_default();
    let operations = std::fs::read_to_string(dir.join("operations.jsonl"))
        .map(|text| text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
        .unwrap_or_default();
    properties::known::annotate(report, faults, operations);
}

pub fn print(report: &Value) {
    println!("\n{:<42} {:<12} {:<12} {:>10} {:>8} {:>8}", "property", "kind", "status", "held", "failed", "unknown");
    for p in report["properties"].as_array().into_iter().flatten() {
        let mark = match p["status"].as_str() {
            Some("failed") => "FAIL",
            Some("unknown") => "  ? ",
            Some("not-reached") => "  - ",
            _ => "  ok",
        };
        println!(
            "{:<42} {:<12} {:<12} {:>10} {:>8} {:>8} {mark}",
            p["id"].as_str().unwrap_or(""),
            p["kind"].as_str().unwrap_or(""),
            p["status"].as_str().unwrap_or(""),
            p["held"].as_u64().unwrap_or(0),
            p["failed"].as_u64().unwrap_or(0),
            p["unknown"].as_u64().unwrap_or(0),
        );
    }
    for p in report["properties"].as_array().into_iter().flatten().filter(|p| p["status"] == "failed") {
        let known = p["known"].as_array().map(|k| format!(" (known server issue: {})", k.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))).unwrap_or_default();
        println!("first failure of {}{known}: {}", p["id"].as_str().unwrap_or(""), p["first_failure"]);
    }
    for p in report["properties"].as_array().into_iter().flatten().filter(|p| p["status"] == "unknown") {
        println!("could not judge {}: {}", p["id"].as_str().unwrap_or(""), p["first_unknown"]);
    }
    for s in report["suspicions_at_stop"].as_array().into_iter().flatten() {
        println!("open when the drivers stopped: {s}");
    }
    if !report["counters"].is_null() {
        println!("counters: {}", report["counters"]);
    }
    for s in report["streams"].as_array().into_iter().flatten() {
        println!("stream: {s}");
    }
    for s in report["per_stream"].as_array().into_iter().flatten() {
        let (c, m) = (&s["counters"], &s["messages"]);
        println!(
            "stream {}: acked {} verified {} final read {} ok/lost/unknown {}/{}/{}",
            s["stream"].as_str().unwrap_or("?"), c["acked"], c["verified"], c["final_verified"], m["ok"], m["lost"], m["unknown"]
        );
    }
    if let Some(slowest) = report["slowest_stream"].as_str() {
        println!("slowest stream: {slowest}");
    }
    for k in report["known_issues"].as_array().into_iter().flatten() {
        println!("known server issue {} ({}, {}): {}; see {}", k["id"].as_str().unwrap_or("?"), k["status"].as_str().unwrap_or("?"),
                 k["versions"], k["title"].as_str().unwrap_or(""), k["write_up"].as_str().unwrap_or(""));
    }
    println!("verdict: {}", report["verdict"].as_str().unwrap_or("?"));
    if report["verdict"] != report["verdict_without_known"] && !report["verdict_without_known"].is_null() {
        println!("verdict without the known server issues: {}", report["verdict_without_known"].as_str().unwrap_or("?"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(held: u64, failed: u64, unknown: u64) -> sdk::Counts {
        sdk::Counts { held, failed, unknown, ..Default::default() }
    }

    #[test]
    fn an_unanswered_question_is_unknown_never_passed() {
        let safety = Property::AckedMessageNeverLost;
        assert_eq!(status(safety, &counts(10, 0, 0)), "passed");
        assert_eq!(status(safety, &counts(10, 0, 1)), "unknown", "held elsewhere does not answer it");
        assert_eq!(status(safety, &counts(10, 1, 1)), "failed");
        assert_eq!(status(Property::ConsumerRecreated, &counts(0, 0, 0)), "not-reached");
        let p = Property::ReplicasAgree;
        assert_eq!(verdict(&[(safety, "passed"), (p, "not-reached")]), "pass");
        assert_eq!(verdict(&[(safety, "unknown"), (p, "passed")]), "unknown");
        assert_eq!(verdict(&[(safety, "unknown"), (p, "failed")]), "fail");
        assert_eq!(verdict(&[(safety, "passed"), (Property::ConsumerRecreated, "unknown")]), "pass", "coverage decides nothing");
    }
}
