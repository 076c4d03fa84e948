//! The outage meter's driver: four times a second it reads the stream's counters and the
//! operations requested on it, and for each operation whose watch closes it records the
//! longest write, read and durable outage around it (`operations.jsonl`, event `outage`),
//! steers Antithesis toward long ones, and judges each against `liveness.outage_bound`
//! where the run knows every fault: an outage that began with no fault in force and lasted
//! longer than the bound before any fault came, and before any later request changed the
//! stream (`judged_stretch`), fails `operation-outage-bounded`. It runs until the publisher
//! has ended.

use crate::context::state::{Ctx, Stats};
use crate::sdk;
use properties::operations::OpKind;
use properties::outage::{judged_stretch, Activity, OpOutages, OutageMeter, Progress};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const EVERY: Duration = Duration::from_millis(250);

pub async fn run(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let mut meter = OutageMeter::new(ctx.cfg.liveness.window);
    let mut next_request = 0;
    let mut tick = tokio::time::interval(EVERY);
    loop {
        tokio::select! {
            _ = ctx.cancel.cancelled() => break,
            _ = ctx.published.cancelled() => break,
            _ = tick.tick() => {}
        }
        for (op, at) in ctx.ops.requests_since(&ctx.stream, &mut next_request) {
            meter.operation(op.id(), at.saturating_duration_since(ctx.live.origin));
        }
        let s = &ctx.stats;
        let durable = ctx.cfg.durable.enabled.then(|| (Stats::get(&s.durable_delivered), Stats::get(&s.durable_received_high)));
        let p = Progress { t: ctx.live.now(), acked: Stats::get(&s.acked), last_acked: Stats::get(&s.last_acked_seq), verified: Stats::get(&s.verified), durable };
        for closed in meter.sample(p) {
            judge(&ctx, &closed);
        }
    }
    for closed in meter.close_all(ctx.live.now()) {
        judge(&ctx, &closed);
    }
    Ok(())
}

/// The stretches with any fault in force (from, to; none: to the end), in order, when the
/// run knows every fault: its own injector's log (also when the injector is off: empty).
fn faults(ctx: &Ctx) -> Option<Vec<(f64, Option<f64>)>> {
    let log = ctx.faults.as_ref()?;
    let events = log.events.lock().map(|e| e.clone()).unwrap_or_default();
    // A sweep: faults in force overlap; a stretch with any in force is one span.
    let mut spans = Vec::new();
    let (mut open, mut since) = (0i64, 0.0);
    for e in &events {
        match e.event {
            "start" => {
                if open == 0 {
                    since = e.t_s;
                }
                open += 1;
            }
            "end" => {
                open -= 1;
                if open == 0 {
                    spans.push((since, Some(e.t_s)));
                }
            }
            _ => {}
        }
    }
    if open > 0 {
        spans.push((since, None));
    }
    Some(spans)
}

fn judge(ctx: &Ctx, o: &OpOutages) {
    let Some(op) = OpKind::ALL.into_iter().find(|k| k.id() == o.op) else { return };
    let bound = ctx.cfg.liveness.outage_bound;
    ctx.ops.record(&ctx.stream, op, "outage", json!({ "requested_s": o.requested_s, "write": o.write, "read": o.read, "durable": o.durable, "shorter": o.shorter }));
    let longest = o.all().map(|(_, s)| s.secs()).fold(0.0, f64::max);
    sdk::above!(Property::OperationCausedLongOutage, (longest * 1000.0) as u64, bound.as_millis() as u64 / 2, &json!({ "op": o.op, "outage_s": longest }));
    let Some(faults) = faults(ctx) else { return }; // faults unknown: measured, not judged
    let requests = &o.requests;
    let times: Vec<f64> = requests.iter().map(|(_, t)| *t).collect();
    for (a, span) in o.all() {
        let (from, to) = judged_stretch(&span, &faults, &times);
        if to - from <= bound.as_secs_f64() {
            sdk::check!(Property::OperationOutageBounded, true, &json!({ "op": o.op, "activity": a, "outage_s": span.secs(), "judged_s": to - from }));
        } else {
            // The request the judged stretch began after, when it is a later one.
            let after = requests.iter().find(|(_, t)| *t == from).map(|(op, t)| json!({ "op": op, "requested_s": t }));
            let within: Vec<_> = requests.iter().filter(|(_, t)| *t > span.from_s && *t < span.to_s).map(|(op, t)| json!({ "op": op, "requested_s": t })).collect();
            let mut details = json!({
                "stream": ctx.stream, "op": o.op, "requested_s": o.requested_s, "activity": a, "outage": span, "outage_s": span.secs(),
                "judged": [from, to], "judged_s": to - from, "judged_after": after, "requests_within": within, "bound_s": bound.as_secs_f64(),
                "problem": "after an operation the activity stopped, with no fault in force and no other change requested, for longer than the bound" });
            if a == Activity::Write {
                let read = |m: &std::sync::Mutex<String>| m.lock().map(|e| e.clone()).unwrap_or_default();
                details["first_publish_error"] = json!(read(&ctx.stats.first_publish_error));
                details["last_publish_error"] = json!(read(&ctx.stats.last_publish_error));
            }
            if a == Activity::Read {
                // Each ordered consumer replaced meanwhile, as its server described it.
                details["replacements"] = json!(ctx.stats.replacements_between(span.from_s, span.to_s));
            }
            sdk::check!(Property::OperationOutageBounded, false, &details);
        }
    }
}
