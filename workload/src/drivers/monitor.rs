//! The stream monitor: every two seconds the stream must exist, and hold every acknowledged
//! message (last sequence and count at least the last ack; no acknowledged sequence purged
//! or deleted). Each judgment counts only when confirmed over time (see
//! [`properties::confirm`]): a restarting node or a deposed leader can answer from a stale
//! view for a moment.

use crate::jsapi::{self, ApiError, StreamInfo};
use crate::sdk;
use crate::state::{Ctx, Stats};
use properties::confirm::{Confirm, Confirmation};
use properties::Property;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

pub async fn run(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let client = ctx.connect("monitor").await?;
    let mut watch = StreamWatch::new(ctx.cfg.liveness.quiet);
    while !ctx.cancel.is_cancelled() {
        let acked_before = Stats::get(&ctx.stats.last_acked_seq);
        let answer = jsapi::stream_info_deleted(&client, &ctx.stream, ctx.api_timeout()).await;
        watch.observe(&ctx, &answer, acked_before);
        tokio::select! {
            _ = ctx.cancel.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
    Ok(())
}

/// What one look at the stream showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Look {
    /// The stream exists and holds every ack.
    Whole,
    /// Missing or short, not yet for long enough to judge.
    Pending,
    /// Missing or short for long enough: reported.
    Reported,
    /// No answer: nothing judged.
    Unobserved,
}

/// The three confirmations the monitor keeps.
pub struct StreamWatch {
    missing: Confirm,
    short: Confirm,
    holes: Confirm,
}

impl StreamWatch {
    pub fn new(hold: Duration) -> Self {
        Self { missing: Confirm::new(hold, 3), short: Confirm::new(hold, 3), holes: Confirm::new(hold, 3) }
    }

    /// Feeds one stream-info answer, taken after reading `acked_before`, and reports what
    /// the confirmations confirm.
    pub fn observe(&mut self, ctx: &Ctx, answer: &Result<StreamInfo, ApiError>, acked_before: u64) -> Look {
        let now = ctx.live.now();
        let quiet = |why: &str| ctx.live.quiet.request(ctx.cfg.liveness.quiet, why);
        if matches!(answer, Err(e) if e.err_code() == Some(jsapi::STREAM_NOT_FOUND)) {
            let details = json!({ "stream": ctx.stream, "last_acked_seq": acked_before });
            return judge(&mut self.missing, now, true, Property::StreamNeverDisappears, details, || quiet("stream reported missing"));
        }
        let Ok(info) = answer else { return Look::Unobserved };
        self.missing.observe(now, false);
        sdk::hold(Property::StreamNeverDisappears);
        if let Some(cluster) = &info.view.cluster {
            let leader = cluster.leader.clone().unwrap_or_default();
            if let Ok(mut l) = ctx.stats.leader.lock() {
                l.clone_from(&leader);
            }
            if leader.is_empty() {
                // A leaderless stream's info carries no trustworthy state: judge nothing.
                return Look::Unobserved;
            }
        }
        let state = &info.view.state;
        let short = state.last_seq < acked_before || state.messages < acked_before;
        let details = json!({ "last_seq": state.last_seq, "messages": state.messages, "last_acked_seq": acked_before });
        let a = judge(&mut self.short, now, short, Property::StreamStateCoversAcks, details, || quiet("stream state below the last ack"));
        let lost = state.acked_missing(acked_before);
        let details = json!({ "acked_seqs_missing": lost, "first_seq": state.first_seq, "last_acked_seq": acked_before,
                              "observed_by": "stream info: purged or deleted acknowledged sequences" });
        let b = judge(&mut self.holes, now, !lost.is_empty(), Property::AckedMessageNeverLost, details, || quiet("acknowledged sequences missing"));
        [a, b].into_iter().max_by_key(|l| match l {
            Look::Reported => 3,
            Look::Pending => 2,
            Look::Unobserved => 1,
            Look::Whole => 0,
        }).unwrap_or(Look::Whole)
    }
}

/// One observation for one confirmation: reports the property when confirmed (then starts
/// over), holds it when good, asks for quiet once a bad streak outlives a blip.
fn judge(c: &mut Confirm, now: Duration, bad: bool, p: Property, mut details: Value, ask_quiet: impl FnOnce()) -> Look {
    match c.observe(now, bad) {
        Confirmation::Good => {
            sdk::hold(p);
            Look::Whole
        }
        Confirmation::Pending { ask_quiet: asked } => {
            if asked {
                ask_quiet();
            }
            Look::Pending
        }
        Confirmation::Confirmed { bad_for } => {
            details["confirmed_for_s"] = json!(bad_for.as_secs_f64());
            sdk::check(p, false, &details);
            c.reset();
            Look::Reported
        }
    }
}
