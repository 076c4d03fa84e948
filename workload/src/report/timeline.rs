//! The run over time. While the drivers run, one sample a second goes to `timeline.jsonl`
//! (counters, not messages: an 8-hour run writes about 3 MB); at the end it is drawn with
//! the fault log and each property's first failure as `timeline.svg`, aggregated into at
//! most [`COLUMNS`] time buckets so the picture stays small whatever the run's length.

use crate::context::state::Stats;
use crate::context::streams::Streams;
use tokio_util::sync::CancellationToken;
use properties::ranges::Ranges;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One second of the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the run started.
    pub t: f64,
    pub acked: u64,
    /// Every sequence up to this one acknowledged in order (maps a sequence to the time it
    /// was acknowledged).
    #[serde(default)]
    pub acked_seq: u64,
    pub verified: u64,
    /// Acked but not yet read back by the live reader.
    pub lag: u64,
    pub replicas: u64,
    pub leader: String,
    /// A quiet period (no faults) was in force.
    pub quiet: bool,
}

/// Samples every second into `path` until `stop`: totals over the streams (and the epochs
/// before, when the run rotates them), the replica count and leader of the first.
pub async fn record(streams: Arc<Streams>, stop: CancellationToken, started: Instant, path: std::path::PathBuf) -> anyhow::Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let quiet = streams.first().live.quiet.subscribe();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let ctxs = streams.now();
        let s = &ctxs[0].stats;
        let sample = Sample {
            t: started.elapsed().as_secs_f64(),
            acked: streams.total(|s| Stats::get(&s.acked)),
            acked_seq: streams.total(|s| Stats::get(&s.last_acked_seq)),
            verified: streams.total(|s| Stats::get(&s.verified)),
            lag: ctxs.iter().map(|c| c.stats.lag()).sum(),
            replicas: Stats::get(&s.replicas),
            leader: s.leader.lock().map(|l| l.clone()).unwrap_or_default(),
            quiet: quiet.borrow().is_some_and(|until| until > Instant::now()),
        };
        writeln!(file, "{}", serde_json::to_string(&sample)?)?;
        file.flush()?;
    }
    Ok(())
}

/// A fault from its start to its end (a restart starts and ends at once).
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub from: f64,
    pub to: f64,
    pub kind: String,
    pub nodes: String,
}

/// Pairs the fault log's start and end events (same kind and nodes, in order; a node back
/// under a new name after a membership change, `n2` -> `n2-2`, is the same node); a fault
/// still in force when the log ends lasts until `end`.
pub fn spans(events: &[Value], end: f64) -> Vec<Span> {
    let mut open: Vec<Span> = Vec::new();
    let mut done = Vec::new();
    for e in events {
        let (Some(t), Some(kind)) = (e["t_s"].as_f64(), e["kind"].as_str()) else { continue };
        let nodes = e["nodes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect::<Vec<_>>().join(",");
        let base = |nodes: &str| nodes.split(',').map(|n| n.split('-').next().unwrap_or(n)).collect::<Vec<_>>().join(",");
        match e["event"].as_str() {
            Some("start") => open.push(Span { from: t, to: t, kind: kind.to_string(), nodes }),
            Some("end") => {
                if let Some(i) = open.iter().position(|s| s.kind == kind && base(&s.nodes) == base(&nodes)) {
                    let mut s = open.remove(i);
                    s.to = t;
                    done.push(s);
                }
            }
            _ => {}
        }
    }
    done.extend(open.into_iter().map(|s| Span { to: end.max(s.from), ..s }));
    done.sort_by(|a, b| a.from.total_cmp(&b.from));
    done
}

/// At most this many time buckets are drawn.
pub const COLUMNS: usize = 600;

/// One time bucket: rates over it, the worst lag, the replica count at its end.
#[derive(Clone, Debug, PartialEq)]
struct Bucket {
    /// From `t0` to `t` (seconds since the run started).
    t0: f64,
    t: f64,
    acked_per_s: f64,
    verified_per_s: f64,
    lag: u64,
    replicas: u64,
    leader_changes: usize,
    quiet: bool,
    /// The sequences acknowledged in it: `seqs.0 + 1 ..= seqs.1`.
    seqs: (u64, u64),
}

fn buckets(samples: &[Sample]) -> Vec<Bucket> {
    if samples.len() < 2 {
        return Vec::new();
    }
    let per = samples.len().div_ceil(COLUMNS);
    let mut out = Vec::new();
    let mut prev = &samples[0];
    let mut seq_from = 0; // the first bucket also holds what was acked before the first sample
    for chunk in samples[1..].chunks(per) {
        let last = &chunk[chunk.len() - 1];
        let dt = (last.t - prev.t).max(1e-3);
        let mut leader = prev.leader.as_str();
        let mut changes = 0;
        for s in chunk {
            if !s.leader.is_empty() && s.leader != leader {
                if !leader.is_empty() {
                    changes += 1;
                }
                leader = &s.leader;
            }
        }
        out.push(Bucket {
            t0: prev.t,
            t: last.t,
            acked_per_s: last.acked.saturating_sub(prev.acked) as f64 / dt,
            verified_per_s: last.verified.saturating_sub(prev.verified) as f64 / dt,
            lag: chunk.iter().map(|s| s.lag).max().unwrap_or(0),
            replicas: last.replicas,
            leader_changes: changes,
            quiet: chunk.iter().any(|s| s.quiet),
            seqs: (seq_from, last.acked_seq.max(seq_from)),
        });
        seq_from = last.acked_seq.max(seq_from);
        prev = last;
    }
    out
}

/// Fills per fault kind (shaded over every panel).
fn color(kind: &str) -> &'static str {
    match kind {
        "kill" => "#d62728",
        "restart" => "#ff7f0e",
        "pause" => "#9467bd",
        "isolate" => "#8c564b",
        "split" => "#e377c2",
        "latency" => "#7f7f7f",
        "membership" => "#17becf",
        _ => "#bcbd22",
    }
}

/// The strip marking quiet periods (faults paused).
const QUIET: &str = "#6baed6";
const W: f64 = 1000.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
/// The line panels: (title, top, height); the faults panel (a row per kind) and the
/// messages strip follow them.
const PANELS: [(&str, f64, f64); 3] = [("msg/s acked (blue), verified (orange)", 60.0, 170.0), ("reader lag (messages)", 260.0, 100.0), ("replicas", 390.0, 60.0)];
const FAULTS_TOP: f64 = 480.0;
const ROW: f64 = 10.0;
const STRIP: f64 = 16.0;
const MESSAGES_TITLE: &str = "messages by the time they were acknowledged: ok (green), lost (red), unknown (grey)";

/// What became of the acknowledged messages (see `properties::outcomes`): the sequences
/// confirmed gone, and those no read could judge.
#[derive(Clone, Debug, Default)]
pub struct Fates {
    pub lost: Ranges,
    pub unread: Option<(u64, u64)>,
    /// A run of several streams: (ok, lost, unknown) over all of them, which cannot be
    /// placed in time (each stream numbers its own sequences); drawn as one cell.
    pub whole: Option<(u64, u64, u64)>,
}

impl Fates {
    /// (ok, lost, unknown) among the sequences `from + 1 ..= to`.
    fn of(&self, (from, to): (u64, u64)) -> (u64, u64, u64) {
        let (a, b) = (from + 1, to);
        let lost = self.lost.count_in(a, b);
        let unknown = match self.unread {
            Some((ua, ub)) if ua.max(a) <= ub.min(b) => {
                let (c, d) = (ua.max(a), ub.min(b));
                d + 1 - c - self.lost.count_in(c, d)
            }
            _ => 0,
        };
        ((b + 1).saturating_sub(a) - lost - unknown, lost, unknown)
    }
}

/// The picture: throughput, reader lag and replica count over time, a row of fault spans
/// per kind (time under any fault shaded over everything), quiet periods marked, leader
/// changes ticked, the acknowledged messages as ok / lost / unknown by the time they were
/// acknowledged, and each property's first failure as a red line.
pub fn svg(samples: &[Sample], faults: &[Span], failures: &[(String, f64)], fates: &Fates) -> String {
    let bs = buckets(samples);
    let t_max = samples.last().map_or(1.0, |s| s.t).max(faults.iter().map(|f| f.to).fold(1.0, f64::max));
    let x = |t: f64| LEFT + (t / t_max).clamp(0.0, 1.0) * (W - LEFT - RIGHT);
    let mut kinds: Vec<&str> = faults.iter().map(|f| f.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let faults_h = ROW * kinds.len().max(1) as f64;
    let messages_top = FAULTS_TOP + faults_h + 30.0;
    let (top, bottom) = (PANELS[0].1, messages_top + STRIP);
    let height = bottom + 50.0;
    let mut s = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" viewBox=\"0 0 {W} {height}\" font-family=\"sans-serif\" font-size=\"11\">\n");
    s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    // Time under faults, shaded lightly over every panel (the union of all faults: a
    // long run has thousands), under everything else.
    let spans = |of: &dyn Fn(&Span) -> bool| merged(faults.iter().filter(|f| of(f)).map(|f| (x(f.from), x(f.to), f.from, f.to, f.nodes.clone())));
    for m in spans(&|_| true) {
        let _ = writeln!(s, "<rect x=\"{:.1}\" y=\"{top}\" width=\"{:.1}\" height=\"{}\" fill=\"#999\" fill-opacity=\"0.12\"/>", m.x0, (m.x1 - m.x0).max(1.0), bottom - top);
    }
    // The faults panel: one row per kind, spans closer than a pixel drawn as one.
    let _ = writeln!(s, "<text x=\"{LEFT}\" y=\"{}\">faults</text>", FAULTS_TOP - 4.0);
    for (row, kind) in kinds.iter().enumerate() {
        let y = FAULTS_TOP + ROW * row as f64;
        let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"9\">{}</text>", LEFT - 4.0, y + ROW - 2.0, esc(kind));
        for m in spans(&|f: &Span| f.kind == *kind) {
            let _ = writeln!(
                s,
                "<rect x=\"{:.1}\" y=\"{}\" width=\"{:.1}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>",
                m.x0,
                y + 1.0,
                (m.x1 - m.x0).max(1.0),
                ROW - 2.0,
                color(kind),
                esc(&m.title(kind))
            );
        }
    }
    // Quiet periods: a strip under the messages.
    for b in bs.iter().filter(|b| b.quiet) {
        let _ = writeln!(s, "<rect x=\"{:.1}\" y=\"{}\" width=\"{:.1}\" height=\"6\" fill=\"{QUIET}\"/>", x(b.t0), bottom + 4.0, (x(b.t) - x(b.t0)).max(1.0));
    }
    let boxes = PANELS.iter().copied().chain([("", FAULTS_TOP, faults_h), (MESSAGES_TITLE, messages_top, STRIP)]);
    for (title, y0, h) in boxes {
        let _ = writeln!(s, "<rect x=\"{LEFT}\" y=\"{y0}\" width=\"{}\" height=\"{h}\" fill=\"none\" stroke=\"#999\"/>", W - LEFT - RIGHT);
        if !title.is_empty() {
            let _ = writeln!(s, "<text x=\"{LEFT}\" y=\"{}\">{}</text>", y0 - 4.0, esc(title));
        }
    }
    let line = |s: &mut String, values: &[(f64, f64)], (y0, h): (f64, f64), max: f64, stroke: &str, step: bool| {
        let y = |v: f64| y0 + h - (v / max.max(1e-9)).clamp(0.0, 1.0) * h;
        let mut pts = String::new();
        let mut last_y = None;
        for &(t, v) in values {
            if let (true, Some(ly)) = (step, last_y) {
                let _ = write!(pts, "{:.1},{:.1} ", x(t), ly);
            }
            let _ = write!(pts, "{:.1},{:.1} ", x(t), y(v));
            last_y = Some(y(v));
        }
        let _ = writeln!(s, "<polyline fill=\"none\" stroke=\"{stroke}\" stroke-width=\"1.2\" points=\"{}\"/>", pts.trim_end());
        let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", LEFT - 4.0, y0 + 10.0, human(max));
        let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>", LEFT - 4.0, y0 + h);
    };
    let rate_max = bs.iter().map(|b| b.acked_per_s.max(b.verified_per_s)).fold(0.0, f64::max);
    let panel = |i: usize| (PANELS[i].1, PANELS[i].2);
    line(&mut s, &bs.iter().map(|b| (b.t, b.acked_per_s)).collect::<Vec<_>>(), panel(0), rate_max, "#1f77b4", false);
    line(&mut s, &bs.iter().map(|b| (b.t, b.verified_per_s)).collect::<Vec<_>>(), panel(0), rate_max, "#ff7f0e", false);
    let lag_max = bs.iter().map(|b| b.lag).max().unwrap_or(0) as f64;
    line(&mut s, &bs.iter().map(|b| (b.t, b.lag as f64)).collect::<Vec<_>>(), panel(1), lag_max, "#9467bd", false);
    let rep_max = bs.iter().map(|b| b.replicas).max().unwrap_or(1) as f64;
    line(&mut s, &bs.iter().map(|b| (b.t, b.replicas as f64)).collect::<Vec<_>>(), panel(2), rep_max, "#000", true);
    // Leader changes: a tick above the replicas panel.
    for b in bs.iter().filter(|b| b.leader_changes > 0) {
        let y0 = PANELS[2].1;
        let _ = writeln!(s, "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#333\"><title>{3} leader change(s)</title></line>", x(b.t), y0, y0 + 8.0, b.leader_changes);
    }
    // Messages: one cell per bucket, red where any was lost, grey where any is unknown;
    // runs of all-ok buckets drawn as one cell.
    let (y0, h) = (messages_top, STRIP);
    let fates_of: Vec<(u64, u64, u64)> = bs.iter().map(|b| fates.of(b.seqs)).collect();
    let mut i = 0;
    if let (Some((ok, lost, unknown)), Some(last)) = (fates.whole, bs.last()) {
        let fill = if lost > 0 { "#d62728" } else if unknown > 0 { "#999" } else { "#2ca02c" };
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{y0}" width="{:.1}" height="{h}" fill="{fill}"><title>every stream: ok {ok}, lost {lost}, unknown {unknown} (each stream's in report.json)</title></rect>"#,
            x(0.0),
            (x(last.t) - x(0.0)).max(1.0)
        );
        i = bs.len();
    }
    while i < bs.len() {
        let (mut ok, lost, unknown) = fates_of[i];
        let mut j = i + 1;
        while lost + unknown == 0 && j < bs.len() && fates_of[j].1 + fates_of[j].2 == 0 {
            ok += fates_of[j].0;
            j += 1;
        }
        let (from, to) = (bs[i].seqs.0 + 1, bs[j - 1].seqs.1);
        if to >= from {
            let fill = if lost > 0 { "#d62728" } else if unknown > 0 { "#999" } else { "#2ca02c" };
            let _ = writeln!(
                s,
                "<rect x=\"{:.1}\" y=\"{y0}\" width=\"{:.1}\" height=\"{h}\" fill=\"{fill}\"><title>sequences {from}-{to}: ok {ok}, lost {lost}, unknown {unknown}</title></rect>",
                x(bs[i].t0),
                (x(bs[j - 1].t) - x(bs[i].t0)).max(1.0)
            );
        }
        i = j;
    }
    // Time axis.
    let step = nice_step(t_max / 8.0);
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", x(t), bottom + 22.0, clock(t));
        t += step;
    }
    // First failures, on top (labels near the right edge end at their line).
    for (i, (id, at)) in failures.iter().enumerate() {
        let xf = x(*at);
        let _ = writeln!(s, "<line x1=\"{xf:.1}\" x2=\"{xf:.1}\" y1=\"{}\" y2=\"{bottom}\" stroke=\"#b00\" stroke-width=\"1.5\"/>", top - 14.0);
        let (lx, anchor) = if xf > W - 300.0 { (xf - 3.0, "end") } else { (xf + 3.0, "start") };
        let _ = writeln!(s, "<text x=\"{lx:.1}\" y=\"{}\" fill=\"#b00\" text-anchor=\"{anchor}\">{} ({})</text>", 14.0 + 12.0 * (i % 3) as f64, esc(id), clock(*at));
    }
    let _ = writeln!(s, "<rect x=\"{LEFT}\" y=\"{}\" width=\"10\" height=\"6\" fill=\"{QUIET}\"/><text x=\"{}\" y=\"{}\">quiet (faults paused); shaded: any fault in force</text>", height - 12.0, LEFT + 13.0, height - 5.0);
    s += "</svg>\n";
    s
}

/// Spans drawn as pixel intervals, merged where they touch or are less than a pixel apart:
/// the first one's label, the whole time covered and how many were merged.
struct Merged {
    x0: f64,
    x1: f64,
    t0: f64,
    t1: f64,
    n: usize,
    label: String,
}

fn merged(spans: impl Iterator<Item = (f64, f64, f64, f64, String)>) -> Vec<Merged> {
    let mut spans: Vec<_> = spans.collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<Merged> = Vec::new();
    for (x0, x1, t0, t1, label) in spans {
        match out.last_mut() {
            Some(m) if x0 <= m.x1 + 1.0 => {
                (m.x1, m.t1, m.n) = (m.x1.max(x1), m.t1.max(t1), m.n + 1);
            }
            _ => out.push(Merged { x0, x1: x1.max(x0), t0, t1, n: 1, label }),
        }
    }
    out
}

impl Merged {
    fn title(&self, kind: &str) -> String {
        let what = if self.n == 1 { self.label.clone() } else { format!("x{}", self.n) };
        format!("{kind} {what} {:.0}-{:.0} s", self.t0, self.t1)
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw` seconds (at least 1 s).
fn nice_step(raw: f64) -> f64 {
    let raw = raw.max(1.0);
    let pow = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * pow).find(|s| *s >= raw).unwrap_or(10.0 * pow)
}

fn clock(t: f64) -> String {
    let t = t.round() as u64;
    if t >= 3600 {
        format!("{}h{:02}m", t / 3600, t % 3600 / 60)
    } else if t >= 60 {
        format!("{}m{:02}s", t / 60, t % 60)
    } else {
        format!("{t}s")
    }
}

fn human(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// The picture of the run in `dir` (its timeline.jsonl and faults.jsonl, and the report's
/// first failures and lost messages); `None` when the run left no timeline (a composer check, for example).
pub fn svg_of_run(dir: &Path, report: &Value) -> Option<String> {
    let samples: Vec<Sample> = std::fs::read_to_string(dir.join("timeline.jsonl")).ok()?.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    if samples.len() < 2 {
        return None;
    }
    let events: Vec<Value> = std::fs::read_to_string(dir.join("faults.jsonl")).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let end = samples.last().map_or(0.0, |s| s.t);
    let failures: Vec<(String, f64)> = report["properties"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["status"] == "failed")
        .filter_map(|p| Some((p["id"].as_str()?.to_string(), p["first_failure_s"].as_f64()?)))
        .collect();
    Some(svg(&samples, &spans(&events, end), &failures, &fates_of(report)))
}

/// The lost and unread sequences `report.json` lists (`messages`).
pub fn fates_of(report: &Value) -> Fates {
    let pair = |v: &Value| Some((v[0].as_u64()?, v[1].as_u64()?));
    let m = &report["messages"];
    if report["per_stream"].as_array().is_some_and(|s| s.len() > 1) {
        let n = |k: &str| m[k].as_u64().unwrap_or(0);
        return Fates { whole: Some((n("ok"), n("lost"), n("unknown"))), ..Fates::default() };
    }
    let mut lost = Ranges::default();
    for (from, to) in m["lost_ranges"].as_array().into_iter().flatten().filter_map(pair) {
        lost.insert_range(from, to);
    }
    Fates { lost, unread: pair(&m["unread"]), whole: None }
}

/// Text for HTML and SVG.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample(t: f64, acked: u64, leader: &str) -> Sample {
        Sample { t, acked, acked_seq: acked, verified: acked.saturating_sub(10), lag: 10, replicas: 3, leader: leader.into(), quiet: t > 50.0 }
    }

    #[test]
    fn fault_events_pair_into_spans_and_open_ones_last_to_the_end() {
        let events = vec![
            json!({"t_s": 1.0, "event": "start", "kind": "kill", "nodes": ["n1"]}),
            json!({"t_s": 2.0, "event": "start", "kind": "split", "nodes": ["n2", "n3"]}),
            json!({"t_s": 4.0, "event": "end", "kind": "kill", "nodes": ["n1"]}),
            json!({"t_s": 5.0, "event": "start", "kind": "restart", "nodes": ["n1"]}),
            json!({"t_s": 5.0, "event": "end", "kind": "restart", "nodes": ["n1"]}),
            json!({"t_s": 6.0, "event": "start", "kind": "membership", "nodes": ["n3"]}),
            json!({"t_s": 7.0, "event": "end", "kind": "membership", "nodes": ["n3-2"]}),
        ];
        let s = spans(&events, 9.0);
        assert_eq!(s.len(), 4);
        assert_eq!((s[3].kind.as_str(), s[3].to), ("membership", 7.0), "back under a new name: the same node");
        assert_eq!((s[0].kind.as_str(), s[0].from, s[0].to), ("kill", 1.0, 4.0));
        assert_eq!((s[1].kind.as_str(), s[1].nodes.as_str(), s[1].to), ("split", "n2,n3", 9.0));
        assert_eq!((s[2].from, s[2].to), (5.0, 5.0));
    }

    #[test]
    fn a_long_run_is_drawn_in_a_bounded_number_of_buckets() {
        let samples: Vec<Sample> = (0..28_800).map(|i| sample(i as f64, i * 1000, if i % 100 < 50 { "n1" } else { "n2" })).collect();
        let b = buckets(&samples);
        assert!(b.len() <= COLUMNS, "{}", b.len());
        assert!((b[10].acked_per_s - 1000.0).abs() < 1.0, "{:?}", b[10]);
        assert_eq!(b.iter().map(|b| b.leader_changes).sum::<usize>(), 575, "every change counted once");
        let picture = svg(&samples, &[], &[("acked-message-never-lost".into(), 3600.0)], &Fates::default());
        assert!(picture.len() < 200_000, "{} bytes", picture.len());
        assert!(picture.contains("acked-message-never-lost (1h00m)"));
    }

    #[test]
    fn the_picture_shades_faults_and_marks_failures() {
        let samples: Vec<Sample> = (0..100).map(|i| sample(i as f64, i * 50, "n1")).collect();
        let faults = vec![Span { from: 10.0, to: 20.0, kind: "kill".into(), nodes: "n1".into() }];
        let picture = svg(&samples, &faults, &[("replicas-agree".into(), 42.0)], &Fates::default());
        assert!(picture.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(picture.contains("<title>kill n1 10-20 s</title>"));
        assert!(picture.contains("replicas-agree (42s)"));
        assert!(picture.contains(&format!("fill=\"{QUIET}\"")), "quiet periods marked");
        assert!(picture.trim_end().ends_with("</svg>"));
        assert!(picture.contains("<title>sequences 1-4950: ok 4950, lost 0, unknown 0</title>"), "all ok: one cell");
    }

    #[test]
    fn lost_and_unread_messages_are_drawn_where_they_were_acknowledged() {
        // 100 acks a second for 100 s: sequence s was acknowledged in second s / 100.
        let samples: Vec<Sample> = (0..=100).map(|i| sample(i as f64, i * 100, "n1")).collect();
        let mut lost = Ranges::default();
        lost.insert_range(4_050, 4_059);
        let fates = Fates { lost, unread: Some((9_801, 10_000)), whole: None };
        let picture = svg(&samples, &[], &[], &fates);
        assert!(picture.contains("<title>sequences 4001-4100: ok 90, lost 10, unknown 0</title>"), "{picture}");
        assert!(picture.contains("<title>sequences 9801-9900: ok 0, lost 0, unknown 100</title>"));
        assert!(picture.contains("<title>sequences 1-4000: ok 4000, lost 0, unknown 0</title>"));
        assert!(picture.contains("<title>sequences 4101-9800: ok 5700, lost 0, unknown 0</title>"));
        let report = json!({ "messages": { "lost_ranges": [[4050, 4059]], "unread": [9801, 10000] } });
        let read = fates_of(&report);
        assert_eq!((read.lost.count_in(1, 10_000), read.unread), (10, Some((9_801, 10_000))));
    }
}
