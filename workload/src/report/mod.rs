//! The property report: every catalog property with its status and counts, the run's
//! counters, and the verdict. Written as `report.json` and printed as a table.

pub mod metrics;
pub mod page;
pub mod timeline;

use crate::history;
use properties::verdict::{verdict, Counts, PropertyRow, Recorded, Status};
use properties::Property;
use serde_json::{json, Value};

/// The whole report from this process's history of judgments; `run` carries the run's own facts (seed,
/// ids, counters, versions). Known server issues are marked by [`mark_known`] afterwards.
pub fn build(run: Value) -> Value {
    build_from(Property::ALL.iter().map(|&p| (p, history::counts(p))).collect(), run)
}

/// The keys [`build_from`] and [`mark_known`] write: what a re-judgment derives again.
const JUDGED: [&str; 8] = ["verdict", "failed", "unknown", "properties", "known_issues", "unexplained", "unknown_unexplained", "verdict_without_known"];

/// A saved report judged again from what it recorded of each property (its counts, kept
/// failures and unknowns) and its facts alone, with the known-issue table of this build:
/// `workload check DIR`. The same judges as the run's own, so an unchanged table gives the
/// same verdict. A property the saved run lacks counts as never evaluated.
pub fn rejudge(saved: &Value, dir: &std::path::Path) -> Value {
    let rows: Vec<Recorded> = saved["properties"].as_array().into_iter().flatten().filter_map(|r| serde_json::from_value(r.clone()).ok()).collect();
    let recorded = |p: Property| rows.iter().find(|r| r.id == p.id()).map(|r| r.tallied.counts()).unwrap_or_default();
    let mut facts = saved.clone();
    if let Some(f) = facts.as_object_mut() {
        f.retain(|k, _| !JUDGED.contains(&k.as_str()));
    }
    let mut report = build_from(Property::ALL.iter().map(|&p| (p, recorded(p))).collect(), facts);
    mark_known(&mut report, dir);
    report
}

fn build_from(counts: Vec<(Property, Counts)>, run: Value) -> Value {
    let rows: Vec<PropertyRow> = counts.iter().map(|(p, c)| PropertyRow::new(*p, c)).collect();
    let statuses: Vec<(Property, Status)> = counts.iter().zip(&rows).map(|((p, _), r)| (*p, r.status)).collect();
    let with = |s: Status| -> Vec<&str> { statuses.iter().filter(|(p, st)| p.decides_verdict() && *st == s).map(|(p, _)| p.id()).collect() };
    let mut report = json!({
        "verdict": verdict(&statuses),
        "failed": with(Status::Failed),
        "unknown": with(Status::Unknown),
        "properties": rows,
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
