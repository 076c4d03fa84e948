//! The report as pages a person reads at a glance, from `report.json` (and the run's
//! `timeline.jsonl` and `faults.jsonl` when it has them): `report.md`, `timeline.svg` and
//! `report.html` (the table and the picture in one file that needs no network).

use crate::report::timeline::{self, esc};
use serde_json::Value;
use std::path::Path;

/// What every page shows, read once from the report.
pub struct Page {
    pub verdict: String,
    /// ("Failed", ids), ("Could not be judged", ids), when not empty.
    pub flags: Vec<(&'static str, Vec<String>)>,
    /// What ran: seed, version, faults, operations, ...
    pub facts: Vec<(&'static str, String)>,
    pub rows: Vec<Row>,
    /// `sometimes` and `reachable` properties never reached.
    pub gaps: Vec<String>,
    /// What became of the messages, when anything was lost or is unknown: one sentence
    /// per kind, naming the sequences.
    pub fates: Vec<String>,
}

/// Lost ranges named on a page (report.json lists more).
const NAMED: usize = 10;

pub struct Row {
    pub id: String,
    pub kind: String,
    pub status: String,
    pub held: String,
    pub failed: String,
    pub unknown: String,
    /// The first failure (or, failing none, the first unknown) with its time.
    pub first: String,
}

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// `a 3, b 1` from a JSON object of counts (empty when there is none).
fn counts(obj: &Value, show: impl Fn(&Value) -> String) -> String {
    obj.as_object().map(|m| m.iter().map(|(k, v)| format!("{k} {}", show(v))).collect::<Vec<_>>().join(", ")).unwrap_or_default()
}

/// Sentences on the lost and unknown messages of `report.json`'s `messages`.
fn fates(m: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let lost = m["lost"].as_u64().unwrap_or(0);
    if lost > 0 {
        let ranges: Vec<String> = m["lost_ranges"].as_array().into_iter().flatten().take(NAMED).map(|r| format!("{}-{}", r[0], r[1])).collect();
        let count = m["lost_range_count"].as_u64().unwrap_or(0);
        let more = if count > NAMED as u64 { format!(" and {} more ranges", count - NAMED as u64) } else { String::new() };
        out.push(format!("Lost: {lost} acknowledged messages, confirmed gone from the stream: sequences {}{more}.", ranges.join(", ")));
    }
    if let Some(r) = m["unread"].as_array() {
        out.push(format!("Unknown: sequences {}-{} were acknowledged but no read reached them.", r[0], r[1]));
    }
    out
}

impl Page {
    pub fn of(report: &Value) -> Page {
        let mut flags: Vec<(&str, Vec<String>)> = [("Failed", "failed"), ("Could not be judged", "unknown")]
            .into_iter()
            .map(|(label, k)| (label, report[k].as_array().into_iter().flatten().map(text).collect::<Vec<_>>()))
            .filter(|(_, ids)| !ids.is_empty())
            .collect();
        let known: Vec<String> = report["known_issues"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| format!("{} ({}, {}: {})", text(&k["id"]), text(&k["status"]), text(&k["write_up"]), text(&k["title"])))
            .collect();
        if !known.is_empty() {
            flags.push(("Known server issues", known));
            flags.push(("Verdict without the failures they explain", vec![text(&report["verdict_without_known"])]));
        }
        let c = &report["counters"];
        let facts = vec![
            ("command", text(&report["command"])),
            ("seed", text(&report["seed"])),
            ("server version", text(&report["server_version"])),
            ("cluster size", text(&report["cluster_size"])),
            ("elapsed", report["elapsed_s"].as_f64().map_or("null".into(), |s| format!("{s:.0} s"))),
            ("fault profile", text(&report["config"]["faults"]["profile"])),
            ("epochs (streams rotated)", report["epochs"].as_array().map_or(String::new(), |all| {
                let acked: Vec<String> = all.iter().map(|e| e["streams"].as_array().into_iter().flatten().map(|s| s["counters"]["acked"].as_u64().unwrap_or(0)).sum::<u64>().to_string()).collect();
                let held = all.iter().filter(|e| e["held"] == true).count();
                let saved: Vec<String> = all.iter().filter_map(|e| e["state_saved_in"].as_str().map(str::to_string)).collect();
                let saved = if saved.is_empty() { String::new() } else { format!("; the nodes' state after a failed one in {}", saved.join(", ")) };
                format!("{}, acked per epoch {}; {held} held every check{saved}", all.len(), acked.join(", "))
            })),
            ("ended early", text(&report["ended_early"])),
            ("streams", report["per_stream"].as_array().map_or(String::new(), |all| {
                let slowest = all.iter().find(|s| s["stream"] == report["slowest_stream"]).map_or(Value::Null, |s| s["counters"]["acked"].clone());
                format!("{}, the slowest {} ({} acked)", all.len(), text(&report["slowest_stream"]), text(&slowest))
            })),
            ("acked / verified by the final read", format!("{} / {}", text(&c["acked"]), text(&c["final_verified"]))),
            ("messages ok / lost / unknown", format!("{} / {} / {}", text(&report["messages"]["ok"]), text(&report["messages"]["lost"]), text(&report["messages"]["unknown"]))),
            ("durable consumer: delivered / confirmed acks", format!("{} / {}", text(&c["durable_delivered"]), text(&c["durable_acks_confirmed"]))),
            ("faults started", counts(&report["faults"]["starts"], text)),
            ("operations (done/settled)", counts(&report["operations"]["counts"], |v| format!("{}/{}", text(&v["done"]), text(&v["settled"])))),
            ("operations not sent", counts(&report["operations"]["skipped"], text)),
        ];
        let facts = facts.into_iter().filter(|(_, v)| !v.is_empty() && v != "null" && !v.starts_with("null /")).collect();
        let props: Vec<&Value> = report["properties"].as_array().into_iter().flatten().collect();
        let rows = props
            .iter()
            .map(|p| Row {
                id: text(&p["id"]),
                kind: text(&p["kind"]),
                status: match p["known"].as_array() {
                    Some(ids) => format!("{} (known: {})", text(&p["status"]), ids.iter().map(text).collect::<Vec<_>>().join(", ")),
                    None => text(&p["status"]),
                },
                held: text(&p["held"]),
                failed: text(&p["failed"]),
                unknown: text(&p["unknown"]),
                first: match (p["first_failure_s"].as_f64(), &p["first_failure"]) {
                    (Some(t), d) => format!("at {t:.0} s: {d}"),
                    (None, d) if !d.is_null() => d.to_string(),
                    _ if !p["first_unknown"].is_null() => format!("unknown: {}", p["first_unknown"]),
                    _ => String::new(),
                },
            })
            .collect();
        let gaps = props.iter().filter(|p| p["status"] == "not-reached" && matches!(p["kind"].as_str(), Some("sometimes" | "reachable"))).map(|p| text(&p["id"])).collect();
        let fates = match report["per_stream"].as_array() {
            // Each stream numbers its own sequences: its sentences name it.
            Some(streams) => streams.iter().flat_map(|s| fates(&s["messages"]).into_iter().map(move |f| format!("{}: {f}", text(&s["stream"])))).collect(),
            None => fates(&report["messages"]),
        };
        Page { verdict: text(&report["verdict"]), flags, facts, rows, gaps, fates }
    }

    pub fn markdown(&self) -> String {
        let cell = |s: &str| s.replace('|', "\\|");
        let mut md = format!("# Run report: {}\n\n", self.verdict.to_uppercase());
        for (label, ids) in &self.flags {
            md += &format!("**{label}:** {}\n\n", ids.join(", "));
        }
        if !self.fates.is_empty() {
            md += &format!("## Messages\n\n{}\n\n", self.fates.join("\n\n"));
        }
        md += "## The run\n\n| | |\n|---|---|\n";
        for (k, v) in &self.facts {
            md += &format!("| {k} | {} |\n", cell(v));
        }
        md += "\n## Properties\n\n| property | kind | status | held | failed | unknown | first failure |\n|---|---|---|---|---|---|---|\n";
        for r in &self.rows {
            let first = if r.first.is_empty() { String::new() } else { format!("`{}`", cell(&r.first)) };
            md += &format!("| {} | {} | {} | {} | {} | {} | {first} |\n", r.id, r.kind, r.status, r.held, r.failed, r.unknown);
        }
        if !self.gaps.is_empty() {
            md += &format!("\n## Coverage gaps\n\nNever reached in this run: {}.\n", self.gaps.join(", "));
        }
        md
    }

    /// One self-contained page: the verdict, what ran, the picture (inline) and the table.
    pub fn html(&self, svg: Option<&str>) -> String {
        let mut h = String::from("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Run report</title><style>\n");
        h += "body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}\n";
        h += "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:left;vertical-align:top}\n";
        h += "tr.failed td{background:#fdd}tr.unknown td{background:#ffd}tr.not-reached td{color:#888}\n";
        h += "code{font-size:12px;word-break:break-all}.fail{color:#b00}.pass{color:#070}.unknown{color:#a60}\n</style></head><body>\n";
        h += &format!("<h1>Run report: <span class=\"{}\">{}</span></h1>\n", esc(&self.verdict), esc(&self.verdict.to_uppercase()));
        for (label, ids) in &self.flags {
            h += &format!("<p><b>{label}:</b> {}</p>\n", esc(&ids.join(", ")));
        }
        if !self.fates.is_empty() {
            h += "<h2>Messages</h2>\n";
            for f in &self.fates {
                h += &format!("<p>{}</p>\n", esc(f));
            }
        }
        h += "<h2>The run</h2>\n<table>\n";
        for (k, v) in &self.facts {
            h += &format!("<tr><th>{}</th><td>{}</td></tr>\n", esc(k), esc(v));
        }
        h += "</table>\n";
        if let Some(svg) = svg {
            h += "<h2>Timeline</h2>\n";
            h += svg;
            h += "\n";
        }
        h += "<h2>Properties</h2>\n<table>\n<tr><th>property</th><th>kind</th><th>status</th><th>held</th><th>failed</th><th>unknown</th><th>first failure</th></tr>\n";
        for r in &self.rows {
            h += &format!(
                "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>\n",
                esc(r.status.split(' ').next().unwrap_or_default()), esc(&r.id), esc(&r.kind), esc(&r.status), esc(&r.held), esc(&r.failed), esc(&r.unknown), esc(&r.first)
            );
        }
        h += "</table>\n";
        if !self.gaps.is_empty() {
            h += &format!("<h2>Coverage gaps</h2>\n<p>Never reached in this run: {}.</p>\n", esc(&self.gaps.join(", ")));
        }
        h += "</body></html>\n";
        h
    }
}


/// Writes report.md, timeline.svg (when the run left a timeline) and report.html into `dir`.
pub fn write(dir: &Path, report: &Value) -> std::io::Result<()> {
    let page = Page::of(report);
    std::fs::write(dir.join("report.md"), page.markdown())?;
    let svg = timeline::svg_of_run(dir, report);
    if let Some(svg) = &svg {
        std::fs::write(dir.join("timeline.svg"), svg)?;
    }
    std::fs::write(dir.join("report.html"), page.html(svg.as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed_report() -> Value {
        json!({
            "verdict": "fail", "failed": ["acked-message-never-lost"], "unknown": [],
            "seed": 3, "server_version": "v2.12.1", "cluster_size": 3, "elapsed_s": 181.2, "command": "run",
            "config": { "faults": { "profile": "aggressive" } },
            "counters": { "acked": 1000, "final_verified": 900 },
            "messages": { "ok": 898, "lost": 2, "unknown": 16, "lost_ranges": [[901, 902]], "lost_range_count": 1, "unread": null },
            "faults": { "starts": { "kill": 4, "pause": 2 } },
            "operations": { "counts": { "scale": { "done": 5, "settled": 4 } }, "skipped": {} },
            "properties": [
                { "id": "acked-message-never-lost", "kind": "always", "status": "failed", "held": 10, "failed": 1, "unknown": 0,
                  "first_failure": { "missing": [901, 902] }, "first_failure_s": 42.4 },
                { "id": "stream-leader-stepped-down", "kind": "reachable", "status": "not-reached", "held": 0, "failed": 0, "unknown": 0 },
            ],
        })
    }

    #[test]
    fn the_markdown_names_the_failure_its_time_and_the_gaps() {
        let md = Page::of(&failed_report()).markdown();
        assert!(md.starts_with("# Run report: FAIL"), "{md}");
        assert!(md.contains("**Failed:** acked-message-never-lost"), "{md}");
        assert!(md.contains("| acked-message-never-lost | always | failed | 10 | 1 | 0 | `at 42 s: {\"missing\":[901,902]}` |"), "{md}");
        assert!(md.contains("| faults started | kill 4, pause 2 |"), "{md}");
        assert!(md.contains("| messages ok / lost / unknown | 898 / 2 / 16 |"), "{md}");
        assert!(md.contains("Lost: 2 acknowledged messages, confirmed gone from the stream: sequences 901-902."), "{md}");
        assert!(md.contains("| operations (done/settled) | scale 5/4 |"), "{md}");
        assert!(md.contains("Never reached in this run: stream-leader-stepped-down."), "{md}");
        assert!(!md.contains("durable consumer"), "facts the run did not have are left out: {md}");
    }

    #[test]
    fn the_html_page_carries_the_table_and_the_picture_escaped() {
        let html = Page::of(&failed_report()).html(Some("<svg id=\"t\"></svg>"));
        assert!(html.contains("<tr class=\"failed\"><td>acked-message-never-lost</td>"), "{html}");
        assert!(html.contains("at 42 s: {&quot;missing&quot;:[901,902]}"), "{html}");
        assert!(html.contains("<svg id=\"t\"></svg>"));
        assert!(html.contains("<p>Lost: 2 acknowledged messages, confirmed gone from the stream: sequences 901-902.</p>"), "{html}");
        assert!(!html.contains("src=") && !html.contains("href="), "needs no network");
    }
}
