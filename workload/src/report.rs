//! The property report: every catalog property with its status and counts, the run's
//! counters, and the verdict. Written as `report.json` and printed as a table.

use crate::sdk;
use properties::{Kind, Property};
use serde_json::{json, Value};

/// "passed", "failed" or "not-reached", from the tally.
pub fn status(p: Property, c: &sdk::Counts) -> &'static str {
    match p.kind() {
        Kind::Always | Kind::Eventually if c.failed > 0 => "failed",
        Kind::Unreachable if c.failed > 0 => "failed",
        Kind::Unreachable => "passed",
        _ if c.held > 0 => "passed",
        _ => "not-reached",
    }
}

/// The whole report; `run` carries the run's own facts (seed, ids, counters, versions).
pub fn build(run: Value) -> Value {
    let properties: Vec<Value> = Property::ALL
        .iter()
        .map(|&p| {
            let c = sdk::counts(p);
            json!({
                "id": p.id(), "kind": p.kind(), "message": p.message(), "status": status(p, &c),
                "held": c.held, "failed": c.failed, "first_failure": c.first_failure,
            })
        })
        .collect();
    let failed: Vec<&str> = Property::ALL
        .iter()
        .filter(|p| p.decides_verdict() && status(**p, &sdk::counts(**p)) == "failed")
        .map(|p| p.id())
        .collect();
    let mut report = json!({
        "verdict": if failed.is_empty() { "pass" } else { "fail" },
        "failed": failed,
        "properties": properties,
    });
    if let (Some(r), Some(extra)) = (report.as_object_mut(), run.as_object()) {
        r.extend(extra.clone());
    }
    report
}

pub fn print(report: &Value) {
    println!("\n{:<42} {:<12} {:<12} {:>10} {:>8}", "property", "kind", "status", "held", "failed");
    for p in report["properties"].as_array().into_iter().flatten() {
        let mark = match p["status"].as_str() {
            Some("failed") => "FAIL",
            Some("not-reached") => "  - ",
            _ => "  ok",
        };
        println!(
            "{:<42} {:<12} {:<12} {:>10} {:>8} {mark}",
            p["id"].as_str().unwrap_or(""),
            p["kind"].as_str().unwrap_or(""),
            p["status"].as_str().unwrap_or(""),
            p["held"].as_u64().unwrap_or(0),
            p["failed"].as_u64().unwrap_or(0),
        );
    }
    for p in report["properties"].as_array().into_iter().flatten().filter(|p| p["status"] == "failed") {
        println!("first failure of {}: {}", p["id"].as_str().unwrap_or(""), p["first_failure"]);
    }
    if !report["counters"].is_null() {
        println!("counters: {}", report["counters"]);
    }
    for s in report["streams"].as_array().into_iter().flatten() {
        println!("stream: {s}");
    }
    println!("verdict: {}", report["verdict"].as_str().unwrap_or("?"));
}
