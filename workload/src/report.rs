//! The property report: every catalog property with its status and counts, the run's
//! counters, and the verdict. Written as `report.json` and printed as a table.

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

/// The whole report; `run` carries the run's own facts (seed, ids, counters, versions).
pub fn build(run: Value) -> Value {
    let counts: Vec<(Property, sdk::Counts)> = Property::ALL.iter().map(|&p| (p, sdk::counts(p))).collect();
    let statuses: Vec<(Property, &str)> = counts.iter().map(|(p, c)| (*p, status(*p, c))).collect();
    let properties: Vec<Value> = counts
        .iter()
        .zip(&statuses)
        .map(|((p, c), (_, status))| {
            json!({
                "id": p.id(), "kind": p.kind(), "message": p.message(), "status": status,
                "held": c.held, "failed": c.failed, "unknown": c.unknown,
                "first_failure": c.first_failure,
                "first_failure_s": c.first_failure_s.map(|s| (s * 10.0).round() / 10.0), "first_unknown": c.first_unknown,
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
        println!("first failure of {}: {}", p["id"].as_str().unwrap_or(""), p["first_failure"]);
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
    println!("verdict: {}", report["verdict"].as_str().unwrap_or("?"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(held: u64, failed: u64, unknown: u64) -> sdk::Counts {
        sdk::Counts { held, failed, unknown, first_failure: None, first_failure_s: None, first_unknown: None }
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
