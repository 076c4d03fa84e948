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
    println!("verdict: {}", report["verdict"].as_str().unwrap_or("?"));
}

/// The report as a page a person reads at a glance (`report.md`): the verdict, what ran,
/// the property table with each failure's first details and time, and the coverage gaps.
pub fn markdown(report: &Value) -> String {
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let props: Vec<&Value> = report["properties"].as_array().into_iter().flatten().collect();
    let mut md = format!("# Run report: {}\n\n", text(&report["verdict"]).to_uppercase());
    for (k, label) in [("failed", "Failed"), ("unknown", "Could not be judged")] {
        let ids: Vec<String> = report[k].as_array().into_iter().flatten().map(text).collect();
        if !ids.is_empty() {
            md += &format!("**{label}:** {}\n\n", ids.join(", "));
        }
    }
    md += "## The run\n\n| | |\n|---|---|\n";
    let c = &report["counters"];
    let facts = [
        ("command", text(&report["command"])),
        ("seed", text(&report["seed"])),
        ("server version", text(&report["server_version"])),
        ("cluster size", text(&report["cluster_size"])),
        ("elapsed", report["elapsed_s"].as_f64().map_or("?".into(), |s| format!("{s:.0} s"))),
        ("fault profile", text(&report["config"]["faults"]["profile"])),
        ("acked / verified by the final read", format!("{} / {}", text(&c["acked"]), text(&c["final_verified"]))),
        ("durable consumer: delivered / confirmed acks", format!("{} / {}", text(&c["durable_delivered"]), text(&c["durable_acks_confirmed"]))),
        ("faults started", counts(&report["faults"]["starts"], |v| text(v))),
        ("operations (done/settled)", counts(&report["operations"]["counts"], |v| format!("{}/{}", text(&v["done"]), text(&v["settled"])))),
        ("operations not sent", counts(&report["operations"]["skipped"], |v| text(v))),
    ];
    for (k, v) in facts.iter().filter(|(_, v)| !v.is_empty() && v != "null" && v != "null / null") {
        md += &format!("| {k} | {} |\n", v.replace('|', "\\|"));
    }
    md += "\n## Properties\n\n| property | kind | status | held | failed | unknown | first failure |\n|---|---|---|---|---|---|---|\n";
    for p in &props {
        let first = match (p["first_failure_s"].as_f64(), &p["first_failure"]) {
            (Some(t), d) => format!("at {t:.0} s: `{}`", d.to_string().replace('|', "\\|")),
            (None, d) if !d.is_null() => format!("`{}`", d.to_string().replace('|', "\\|")),
            _ if !p["first_unknown"].is_null() => format!("unknown: `{}`", p["first_unknown"].to_string().replace('|', "\\|")),
            _ => String::new(),
        };
        md += &format!(
            "| {} | {} | {} | {} | {} | {} | {first} |\n",
            text(&p["id"]), text(&p["kind"]), text(&p["status"]), text(&p["held"]), text(&p["failed"]), text(&p["unknown"])
        );
    }
    let gaps: Vec<String> = props.iter().filter(|p| p["status"] == "not-reached" && matches!(p["kind"].as_str(), Some("sometimes" | "reachable"))).map(|p| text(&p["id"])).collect();
    if !gaps.is_empty() {
        md += &format!("\n## Coverage gaps\n\nNever reached in this run: {}.\n", gaps.join(", "));
    }
    md
}

/// `a 3, b 1` from a JSON object of counts (empty when there is none).
fn counts(obj: &Value, show: impl Fn(&Value) -> String) -> String {
    obj.as_object().map(|m| m.iter().map(|(k, v)| format!("{k} {}", show(v))).collect::<Vec<_>>().join(", ")).unwrap_or_default()
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

    #[test]
    fn the_page_names_the_failure_its_time_and_the_gaps() {
        let report = serde_json::json!({
            "verdict": "fail", "failed": ["acked-message-never-lost"], "unknown": [],
            "seed": 3, "server_version": "v2.12.1", "cluster_size": 3, "elapsed_s": 181.2, "command": "run",
            "config": { "faults": { "profile": "aggressive" } },
            "counters": { "acked": 1000, "final_verified": 900 },
            "faults": { "starts": { "kill": 4, "pause": 2 } },
            "operations": { "counts": { "scale": { "done": 5, "settled": 4 } }, "skipped": {} },
            "properties": [
                { "id": "acked-message-never-lost", "kind": "always", "status": "failed", "held": 10, "failed": 1, "unknown": 0,
                  "first_failure": { "missing": [901, 902] }, "first_failure_s": 42.4 },
                { "id": "stream-leader-stepped-down", "kind": "reachable", "status": "not-reached", "held": 0, "failed": 0, "unknown": 0 },
            ],
        });
        let md = markdown(&report);
        assert!(md.starts_with("# Run report: FAIL"), "{md}");
        assert!(md.contains("**Failed:** acked-message-never-lost"), "{md}");
        assert!(md.contains("| acked-message-never-lost | always | failed | 10 | 1 | 0 | at 42 s: `{\"missing\":[901,902]}` |"), "{md}");
        assert!(md.contains("| faults started | kill 4, pause 2 |"), "{md}");
        assert!(md.contains("| operations (done/settled) | scale 5/4 |"), "{md}");
        assert!(md.contains("Never reached in this run: stream-leader-stepped-down."), "{md}");
        assert!(!md.contains("durable consumer"), "facts the run did not have are left out: {md}");
    }
}
