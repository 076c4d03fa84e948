//! The stream watch: the stream must exist, hold every acknowledged message (last sequence
//! and count at least the last ack; no acknowledged sequence purged, deleted or reported
//! lost), and every current replica must agree with the leader. Each judgment counts only
//! when confirmed over time (see [`properties::confirm`]): a restarting node or a deposed
//! leader can answer from a stale view for a moment. The monitor driver looks every two
//! seconds; the final verification and the composer commands look until judged.

use crate::history;
use crate::drivers::operator::PlacementJudge;
use crate::faults::quiet::Why;
use crate::nats::jsapi::{self, ApiError, StreamInfo};
use crate::nats::replicas::{ReplicaLook, ReplicaProbe};
use crate::sdk;
use crate::context::state::{Ctx, Stats, Suspect};
use properties::confirm::{Confirm, Confirmation};
use properties::replicas::{never_caught_up, Agreement, ReplicaState};
use properties::{Outcome, Property};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub async fn run(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let client = ctx.connect("monitor").await?;
    let mut watch = StreamWatch::new(ctx.cfg.liveness.confirm_hold());
    let mut probe = ReplicaProbe::new(&ctx.cluster.monitor_urls);
    let mut placement = PlacementJudge::default();
    while !ctx.cancel.is_cancelled() {
        let acked_before = Stats::get(&ctx.stats.last_acked_seq);
        // Read first: the look, STREAM.INFO included, began in this wipe generation.
        let generation = ctx.view.wipe_generation();
        let answer = jsapi::stream_info_deleted(&client, &ctx.stream, ctx.api_timeout()).await;
        watch.observe(&ctx, &answer, acked_before);
        if let Ok(info) = &answer {
            ctx.view.saw_stream(&info.view, generation);
            placement.look(&ctx, &info.view).await;
        }
        if probe.enabled() {
            ctx.view.saw_meta_leader(probe.meta_leader().await);
            if let Ok(info) = &answer {
                let look = probe.compare(&ctx.stream, &info.view, false).await;
                let complete = match &look {
                    ReplicaLook::Compared { leader, followers, .. } => complete_copies(leader, followers),
                    // Under steady writes a follower on a slow disk is seldom called
                    // current: count what each node holds all the same.
                    ReplicaLook::NotSettled(_) => probe.states(&ctx.stream, &info.view).await.map_or(0, |(l, f)| complete_copies(&l, &f)),
                    ReplicaLook::Unobserved(_) => 0,
                };
                ctx.view.saw_copies(generation, complete);
                watch.observe_replicas(&ctx, &look);
            }
        }
        tokio::select! {
            _ = ctx.cancel.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
    Ok(())
}

/// Copies (leader included) holding all the leader holds, give or take what was published
/// while the nodes were asked one after another. The membership fault wipes a copy only
/// while two are whole: 2.15.1 lists a follower as current while its store is far behind
/// (a catch-up outside Raft), and wiping the only whole copy loses acknowledged messages
/// by our own hand (seen: an R2 stream's two whole copies wiped 29 s apart, the remaining
/// peer holding 33,965 of 111,975).
fn complete_copies(leader: &ReplicaState, followers: &[ReplicaState]) -> usize {
    1 + followers.iter().filter(|f| f.first_seq == leader.first_seq && f.last_seq + properties::scale::CATCH_UP_STEP >= leader.last_seq).count()
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

/// The confirmations the watch keeps.
pub struct StreamWatch {
    missing: Confirm,
    short: Confirm,
    holes: Confirm,
    replicas: Confirm,
    /// Leader changes in the last minute, for numeric guidance.
    churn: properties::leaders::Churn,
}

impl StreamWatch {
    pub fn new(hold: Duration) -> Self {
        let c = || Confirm::new(hold, 3);
        Self { missing: c(), short: c(), holes: c(), replicas: c(), churn: properties::leaders::Churn::new(Duration::from_secs(60)) }
    }

    /// Feeds one stream-info answer, taken after reading `acked_before`, and reports what
    /// the confirmations confirm.
    pub fn observe(&mut self, ctx: &Ctx, answer: &Result<StreamInfo, ApiError>, acked_before: u64) -> Look {
        let now = ctx.live.now();
        if matches!(answer, Err(e) if e.err_code() == Some(jsapi::STREAM_NOT_FOUND)) {
            let details = json!({ "stream": ctx.stream, "last_acked_seq": acked_before });
            return judge(ctx, &mut self.missing, now, true, Suspect::StreamMissing, Property::StreamNeverDisappears, details);
        }
        let Ok(info) = answer else { return Look::Unobserved };
        judge(ctx, &mut self.missing, now, false, Suspect::StreamMissing, Property::StreamNeverDisappears, Value::Null);
        if let Some(cluster) = &info.view.cluster {
            let leader = cluster.leader.clone().unwrap_or_default();
            if let Ok(mut l) = ctx.stats.leader.lock() {
                l.clone_from(&leader);
            }
            if let Some(changes) = self.churn.saw(now, &leader) {
                sdk::above!(Property::StreamLeaderChangedRepeatedly, changes, 3, &json!({ "stream": ctx.stream, "leader": leader, "changes_in_last_minute": changes }));
            }
            if leader.is_empty() {
                // A leaderless stream's info carries no trustworthy state: judge nothing.
                return Look::Unobserved;
            }
        }
        let state = &info.view.state;
        let short = state.last_seq < acked_before || state.messages < acked_before;
        let details = json!({ "last_seq": state.last_seq, "messages": state.messages, "last_acked_seq": acked_before });
        let a = judge(ctx, &mut self.short, now, short, Suspect::StreamShort, Property::StreamStateCoversAcks, details);
        let missing = state.acked_missing(acked_before);
        let lost: Vec<u64> = state.lost_acked(acked_before).take(10).collect();
        let details = json!({ "acked_seqs_missing": missing, "reported_lost_by_server": lost, "first_seq": state.first_seq,
                              "last_acked_seq": acked_before, "observed_by": "stream info: acknowledged sequences purged, deleted or lost" });
        let b = judge(ctx, &mut self.holes, now, !missing.is_empty(), Suspect::AckedSequencesMissing, Property::AckedMessageNeverLost, details);
        worst(a, b)
    }

    /// Feeds one comparison of the replicas with the leader (see [`ReplicaProbe`]).
    pub fn observe_replicas(&mut self, ctx: &Ctx, look: &ReplicaLook) -> Look {
        let ReplicaLook::Compared { leader, followers, agreement } = look else { return Look::Unobserved };
        Stats::add(&ctx.stats.replica_comparisons, followers.len() as u64);
        let now = ctx.live.now();
        match agreement {
            Agreement::Agree => judge(ctx, &mut self.replicas, now, false, Suspect::ReplicasDisagree, Property::ReplicasAgree, Value::Null),
            Agreement::Disagree(v) => judge(ctx, &mut self.replicas, now, true, Suspect::ReplicasDisagree, Property::ReplicasAgree, v.details.clone()),
            // Only at rest can a replica lag (while writes go on its tail is allowed to
            // differ): it may still catch up, so only a whole window settles that.
            Agreement::Lagging { nodes } => {
                ctx.suspicions.open(Suspect::ReplicasDisagree, &never_caught_up(leader, followers, nodes).details);
                Look::Pending
            }
        }
    }
}

fn worst(a: Look, b: Look) -> Look {
    let rank = |l: Look| match l {
        Look::Reported => 3,
        Look::Pending => 2,
        Look::Unobserved => 1,
        Look::Whole => 0,
    };
    if rank(a) >= rank(b) { a } else { b }
}

/// One observation for one confirmation: reports the property when confirmed (then starts
/// over), holds it when good, and keeps a pending streak as an open suspicion (asking for
/// quiet once it outlives a blip).
fn judge(ctx: &Ctx, c: &mut Confirm, now: Duration, bad: bool, what: Suspect, p: Property, mut details: Value) -> Look {
    match c.observe(now, bad) {
        Confirmation::Good => {
            ctx.suspicions.close(what);
            sdk::check!(p => [Property::StreamNeverDisappears, Property::StreamStateCoversAcks, Property::AckedMessageNeverLost, Property::ReplicasAgree], true, &Value::Null);
            Look::Whole
        }
        Confirmation::Pending { ask_quiet } => {
            ctx.suspicions.open(what, &details);
            if ask_quiet {
                ctx.live.quiet.request(Why::Confirming, ctx.cfg.liveness.confirm_hold(), &format!("{what:?} seen, confirming"));
            }
            Look::Pending
        }
        Confirmation::Confirmed { bad_for } => {
            ctx.suspicions.close(what);
            details["confirmed_for_s"] = json!(bad_for.as_secs_f64());
            sdk::check!(p => [Property::StreamNeverDisappears, Property::StreamStateCoversAcks, Property::AckedMessageNeverLost, Property::ReplicasAgree], false, &details);
            c.reset();
            Look::Reported
        }
    }
}

/// Looks at the stream until its state is judged: whole, or a bad state confirmed over
/// `liveness.quiet` (reported). A streak that starts late still gets its whole hold: the
/// looks go on for a liveness window, longer than the hold. Unknown (and reported as such)
/// when no judgment could be made within that window. `None` (nothing judged) once
/// `wanted` says the stream need not be looked at any more (retired by its driver).
pub async fn judge_stream(ctx: &Ctx, client: &async_nats::Client, acked: u64, cancel: &CancellationToken, wanted: &dyn Fn() -> bool) -> Option<Outcome> {
    let mut watch = StreamWatch::new(ctx.cfg.liveness.confirm_hold());
    let mut window = ctx.live.open_question("stream state");
    loop {
        if !wanted() {
            return None;
        }
        let answer = jsapi::stream_info_deleted(client, &ctx.stream, ctx.api_timeout()).await;
        let last = match watch.observe(ctx, &answer, acked) {
            Look::Whole => return Some(Outcome::Held),
            Look::Reported => return Some(Outcome::Failed),
            Look::Pending => "a bad state not yet confirmed".to_string(),
            Look::Unobserved => answer.err().map_or_else(|| "the stream has no leader".into(), |e| e.to_string()),
        };
        if cancel.is_cancelled() || !window.failed(&last, cancel).await {
            let details = json!({ "stream": ctx.stream, "last_acked_seq": acked, "last_answer": last,
                                  "problem": "the stream's state could not be judged within a liveness window" });
            for p in [Property::StreamNeverDisappears, Property::StreamStateCoversAcks, Property::AckedMessageNeverLost] {
                history::unknown(p, &details);
            }
            return Some(Outcome::Unknown);
        }
    }
}

/// With nothing writing to the stream, every current replica must come to equal the
/// leader within a liveness window; a disagreement confirmed over `liveness.quiet` fails
/// `replicas-agree` at once. Unknown when the replicas never all answered or were never
/// all current. `None` without monitoring endpoints: the check is off.
pub async fn judge_replicas_at_rest(ctx: &Ctx, client: &async_nats::Client, cancel: &CancellationToken) -> Option<Outcome> {
    let mut probe = ReplicaProbe::new(&ctx.cluster.monitor_urls);
    if !probe.enabled() {
        return None;
    }
    let mut watch = StreamWatch::new(ctx.cfg.liveness.confirm_hold());
    let mut window = ctx.live.open_question("replicas agree");
    let mut last = ReplicaLook::NotSettled("not asked yet".into());
    loop {
        if let Ok(info) = jsapi::stream_info(client, &ctx.stream, ctx.api_timeout()).await {
            last = probe.compare(&ctx.stream, &info.view, true).await;
            match watch.observe_replicas(ctx, &last) {
                Look::Whole => return Some(Outcome::Held),
                Look::Reported => return Some(Outcome::Failed),
                Look::Pending | Look::Unobserved => {}
            }
        }
        if cancel.is_cancelled() || !window.failed("replicas not compared yet", cancel).await {
            break;
        }
    }
    match last {
        // Still behind a stream nobody writes to after a whole window: they never caught up.
        ReplicaLook::Compared { leader, followers, agreement: Agreement::Lagging { nodes } } => {
            ctx.suspicions.close(Suspect::ReplicasDisagree);
            sdk::violation!(&never_caught_up(&leader, &followers, &nodes), [Property::ReplicasAgree]);
            Some(Outcome::Failed)
        }
        other => {
            history::unknown(Property::ReplicasAgree, &json!({ "stream": ctx.stream, "last_look": format!("{other:?}"),
                "problem": "the replicas could not be compared within a liveness window" }));
            Some(Outcome::Unknown)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_whole_when_it_holds_what_the_leader_holds_give_or_take_a_step() {
        let at = |node: &str, last_seq: u64| ReplicaState { node: node.into(), first_seq: 1, last_seq, ..Default::default() };
        let leader = at("n5", 111_975);
        assert_eq!(complete_copies(&leader, &[at("n2", 33_965)]), 1, "the catching-up peer 2.15.1 listed as current");
        assert_eq!(complete_copies(&leader, &[at("n1", 111_900), at("n2", 33_965)]), 2);
        assert_eq!(complete_copies(&leader, &[ReplicaState { first_seq: 500, ..at("n1", 111_975) }]), 1, "a copy missing its head is not whole");
        assert_eq!(complete_copies(&leader, &[]), 1);
    }
}
