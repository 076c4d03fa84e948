//! The checksum-verifying ordered reader, used by the live consumer and the final read.
//!
//! An async-nats ordered consumer (ephemeral, R1, no ack) delivers the stream from a start
//! sequence and recreates itself on consumer-sequence gaps. It never checks STREAM
//! sequences, so the [`ReadVerifier`] does. When a stream sequence is skipped, the missing
//! one is looked up in the stream before judging: present means the delivery skipped it,
//! absent (confirmed over time) means it is gone.

use crate::history;
use crate::faults::quiet::Why;
use crate::nats::jsapi;
use crate::drivers::catch_up::{CatchUp, Tick};
use crate::sdk;
use crate::context::state::{Ctx, Stats, Suspect};
use async_nats::jetstream::{self, consumer::pull::OrderedConfig, consumer::DeliverPolicy};
use futures::StreamExt;
use properties::confirm::{Confirm, Confirmation};
use properties::payload::{CHECKSUM_HEADER, MSG_ID_HEADER};
use properties::read::{judge_missing, missing_to, Delivery, Lookup, ReadOutcome, ReadVerifier};
use properties::Property;
use serde_json::json;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// How many times in a row a new consumer placed behind the stream is asked for again
/// (then the last one is kept: the stuck rule replaces it if it stays silent), and the
/// pause before each new request.
const PLACED_BEHIND_RETRIES: u32 = 4;
const PLACED_BEHIND_PAUSE: Duration = Duration::from_millis(250);

/// Where the reader stops.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// Follow the publisher, catching up to its last ack again and again, until it has
    /// finished and every message it got acknowledged was read (or until cancelled).
    Cancelled,
    /// Read up to this sequence (the final read), then return.
    Seq(u64),
}

/// Reads and verifies from sequence 1. `verified` counts verified messages.
/// Returns the verifier's next sequence when done (or cancelled): past the target when
/// every sequence up to it was read or judged missing.
pub async fn read(ctx: &Ctx, until: Until, verified: &AtomicU64) -> anyhow::Result<u64> {
    let client = ctx.connect("reader").await?;
    let js = jetstream::ContextBuilder::new().timeout(ctx.api_timeout()).build(client.clone());
    let mut verifier = ReadVerifier::new(ctx.run.clone(), 1);
    let mut catch_up = CatchUp::new(Property::ConsumerEventuallyCatchesUp, true);
    let mut stuck = Stuck::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // New consumers in a row that were placed behind the stream (see below).
    let mut placed_behind = 0;

    'consumer: loop {
        if done(ctx, until, &verifier) {
            catch_up.reached(verifier.consumed());
            return Ok(verifier.next_seq());
        }
        let start = verifier.next_seq();
        let create = || async {
            let stream = js.get_stream_no_info(&ctx.stream).await?;
            let consumer = stream
                .create_consumer(OrderedConfig {
                    // Only the workload's subject: anything else in the stream shows up as a
                    // skipped sequence that the look-up finds present.
                    filter_subject: ctx.subject.clone(),
                    deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: start },
                    ..Default::default()
                })
                .await?;
            let info = consumer.cached_info();
            let placed = json!({ "name": info.name, "server": info.cluster.as_ref().and_then(|c| c.leader.clone()), "start": start, "num_pending": info.num_pending });
            let (name, pending) = (info.name.clone(), info.num_pending);
            anyhow::Ok((consumer.messages().await?, name, pending, placed))
        };
        // The consumer of the last delivery, and how many this message stream delivered.
        let mut consumer_name = String::new();
        let mut delivered = 0u64;
        let goal = read_target(ctx, until);
        let Some((mut messages, own_name, pending, placed)) = ctx
            .live
            .retry("create ordered consumer", Property::ConsumerEventuallyCatchesUp, &ctx.cancel, create)
            .await
        else {
            return Ok(verifier.next_seq());
        };
        // A consumer whose server counts nothing to deliver while the stream holds acknowledged
        // messages past its start sees a copy of the stream that ends earlier: a peer still
        // catching up (2.15.1 places new consumers there; findings/consumer-placed-on-a-
        // filling-peer: stale for about a second after a scale up, the soak's replacements
        // for 12 s). It would deliver nothing until that copy catches up, so a new one is
        // asked for (placed again, at random among the stream's peers), a few times.
        if pending == 0 && goal >= start && placed_behind < PLACED_BEHIND_RETRIES {
            placed_behind += 1;
            Stats::add(&ctx.stats.reader_placed_behind, 1);
            tracing::info!(consumer = %own_name, server = %placed["server"], start, goal, "a new ordered consumer counts nothing pending while the stream holds more: asked for again");
            abandon(ctx, &client, &own_name);
            tokio::time::sleep(PLACED_BEHIND_PAUSE).await;
            continue 'consumer;
        }
        placed_behind = 0;
        catch_up.consumer = placed;

        loop {
            let next = tokio::select! {
                _ = ctx.cancel.cancelled() => return Ok(verifier.next_seq()),
                _ = tick.tick() => {
                    let goal = read_target(ctx, until);
                    if stuck.stuck(ctx.live.now(), verifier.consumed(), goal, ctx.cfg.liveness.outage_bound / 4) {
                        // A consumer that delivers nothing while the stream holds more: the
                        // client would wait two missed heartbeats (30 s) to replace it. A
                        // quarter of the bound: the outage judged is the server's, and a CI
                        // run had two replacements in a row (the first stalled after a
                        // server evacuation, the second was placed on a peer a move was
                        // filling) add up to 12 s at half the bound.
                        let name = if consumer_name.is_empty() { &own_name } else { &consumer_name };
                        let info = jsapi::request(&client, &format!("CONSUMER.INFO.{}.{name}", ctx.stream), &serde_json::Value::Null, ctx.api_timeout()).await;
                        let state = match &info {
                            Ok(i) => json!({ "exists": true, "num_pending": i["num_pending"], "delivered": i["delivered"], "leader": i["cluster"]["leader"] }),
                            Err(e) => json!({ "error": e.to_string() }),
                        };
                        tracing::info!(consumer = %name, %state, consumed = verifier.consumed(), goal, "the ordered consumer delivered nothing for a quarter of the outage bound while behind: made anew");
                        ctx.stats.replaced_reader(json!({ "t_s": ctx.live.now().as_secs_f64(), "consumer": name, "created_on": catch_up.consumer["server"],
                            "start": catch_up.consumer["start"], "consumed": verifier.consumed(), "goal": goal, "state": state }));
                        Stats::add(&ctx.stats.consumer_stuck_recreates, 1);
                        abandon(ctx, &client, name);
                        recreated(ctx, "delivered nothing while behind");
                        continue 'consumer;
                    }
                    match catch_up.tick(ctx, until, verifier.consumed(), 0) {
                        Tick::Go => {}
                        Tick::Stalled { target } => {
                            // Faults pause now. Is the next message there at all? If the
                            // stream ends before it, that is acknowledged data lost.
                            tail_look_up(ctx, &client, &mut verifier, target).await;
                            catch_up.note_holder(ctx).await;
                            // A consumer stuck since the last fault would wait two missed
                            // heartbeats (30 s) before the client replaced it.
                            recreated(ctx, "quiet period started while behind");
                            continue 'consumer;
                        }
                        Tick::Expired if ctx.live.give_up || ctx.live.finishing.is_cancelled() => return Ok(verifier.next_seq()),
                        Tick::Expired => {
                            recreated(ctx, "no progress for a whole liveness window");
                            continue 'consumer;
                        }
                    }
                    if done(ctx, until, &verifier) {
                        catch_up.reached(verifier.consumed());
                        return Ok(verifier.next_seq());
                    }
                    continue;
                }
                next = messages.next() => next,
            };
            let msg = match next {
                Some(Ok(msg)) => msg,
                Some(Err(e)) => {
                    recreated(ctx, &e.to_string());
                    continue 'consumer;
                }
                None => {
                    recreated(ctx, "message stream ended");
                    continue 'consumer;
                }
            };
            let (seq, delivery) = match msg.info() {
                Ok(info) => {
                    // async-nats recreates an ordered consumer by itself (on consumer
                    // sequence gaps, missed heartbeats, a deleted consumer) under a new
                    // name, starting after the last message it delivered, or at the
                    // stream's start when it delivered none. Only that last case may go back.
                    let from_start = info.consumer != own_name && delivered == 0 && info.consumer_sequence == 1;
                    if consumer_name != info.consumer {
                        if !consumer_name.is_empty() || info.consumer != own_name {
                            recreated(ctx, "the client recreated the ordered consumer");
                        }
                        consumer_name = info.consumer.to_string();
                    }
                    delivered += 1;
                    (info.stream_sequence, if from_start { Delivery::FirstFromStart } else { Delivery::InOrder })
                }
                Err(e) => {
                    sdk::check!(Property::ReadOnlyPublishedMessages, false, &json!({
                        "problem": "delivered message has no JetStream metadata", "error": e.to_string(),
                        "subject": msg.subject.as_str() }));
                    continue;
                }
            };
            let header = |name: &str| msg.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str());
            match verifier.check(seq, delivery, header(MSG_ID_HEADER), header(CHECKSUM_HEADER), &msg.payload) {
                ReadOutcome::Verified => {
                    Stats::add(verified, 1);
                    sdk::hold!(Property::ReadSequenceGapFree);
                    sdk::hold!(Property::ReadContentMatchesPublish);
                    sdk::hold!(Property::ReadOnlyPublishedMessages);
                    if done(ctx, until, &verifier) {
                        catch_up.reached(verifier.consumed());
                        return Ok(verifier.next_seq());
                    }
                }
                ReadOutcome::Violations(vs) => vs.iter().for_each(|v| sdk::violation!(v, [Property::ReadSequenceGapFree, Property::ReadContentMatchesPublish, Property::ReadOnlyPublishedMessages, Property::AckedMessageNeverLost])),
                ReadOutcome::Behind { seq, violation } => {
                    if let Some(v) = violation {
                        sdk::violation!(&v, [Property::ReadSequenceGapFree, Property::ReadContentMatchesPublish, Property::ReadOnlyPublishedMessages, Property::AckedMessageNeverLost]);
                    }
                    // The client restarted a consumer that had delivered nothing from the
                    // stream's start: fine only if `seq` is where the stream starts.
                    if let Some(first) = stream_start_other_than(ctx, &client, seq).await {
                        sdk::violation!(&verifier.not_the_stream_start(seq, first), [Property::ReadSequenceGapFree]);
                    }
                    // Resume ours where the reader is.
                    Stats::add(&ctx.stats.redeliveries, 1);
                    recreated(ctx, "an already verified sequence was delivered again");
                    continue 'consumer;
                }
                ReadOutcome::Gap { from, to } => {
                    match look_up(ctx, &client, from).await {
                        None => {} // could not observe: no judgment, read the gap again
                        Some(Found { lookup, .. }) => {
                            let last_acked = Stats::get(&ctx.stats.last_acked_seq);
                            sdk::violation!(&judge_missing(from, to, lookup, last_acked), [Property::ReadSequenceGapFree, Property::AckedMessageNeverLost]);
                            if lookup == Lookup::Absent {
                                ctx.record_lost(from, to.min(last_acked));
                                verifier.skip_to(to + 1);
                            }
                        }
                    }
                    // Present or unknown: read from `from` again. Absent: go on after the hole.
                    abandon(ctx, &client, if consumer_name.is_empty() { &own_name } else { &consumer_name });
                    recreated(ctx, "stream sequence gap");
                    continue 'consumer;
                }
            }
        }
    }
}

/// When the reader last moved, to tell a consumer that delivers nothing while there is
/// more to read.
#[derive(Default)]
struct Stuck {
    consumed: u64,
    since: std::time::Duration,
}

impl Stuck {
    /// Whether the reader at `consumed` has not moved for `after` at `now` while behind
    /// `goal` (and then starts over: a new consumer gets its own time).
    fn stuck(&mut self, now: std::time::Duration, consumed: u64, goal: u64, after: std::time::Duration) -> bool {
        if consumed != self.consumed || consumed >= goal {
            (self.consumed, self.since) = (consumed, now);
            return false;
        }
        if now.saturating_sub(self.since) < after {
            return false;
        }
        self.since = now;
        true
    }
}

/// The last sequence the reader is to read now.
fn read_target(ctx: &Ctx, until: Until) -> u64 {
    match until {
        Until::Cancelled => Stats::get(&ctx.stats.last_acked_seq),
        Until::Seq(last) => last,
    }
}

fn done(ctx: &Ctx, until: Until, verifier: &ReadVerifier) -> bool {
    match until {
        Until::Cancelled => {
            ctx.cancel.is_cancelled() || (ctx.published.is_cancelled() && verifier.consumed() >= Stats::get(&ctx.stats.last_acked_seq))
        }
        Until::Seq(last) => verifier.consumed() >= last,
    }
}

/// Deletes an ordered consumer the reader leaves behind (in the background: an answer
/// changes nothing), so a reader that goes around the same gap again and again does not
/// pile up consumers until the server refuses more (10026).
fn abandon(ctx: &Ctx, client: &async_nats::Client, name: &str) {
    let (client, api, timeout) = (client.clone(), format!("CONSUMER.DELETE.{}.{name}", ctx.stream), ctx.api_timeout());
    tokio::spawn(async move { jsapi::request(&client, &api, &serde_json::Value::Null, timeout).await });
}

fn recreated(ctx: &Ctx, why: &str) {
    tracing::debug!(why, "recreating the ordered consumer");
    Stats::add(&ctx.stats.consumer_recreates, 1);
    sdk::hold!(Property::ConsumerRecreated);
}

/// The stream's first sequence when it is not `seq` (sequence 1 always is, as far as this
/// reader can tell: nothing precedes it). Asked within a liveness window; no answer is an
/// unknown, never a pass.
async fn stream_start_other_than(ctx: &Ctx, client: &async_nats::Client, seq: u64) -> Option<u64> {
    if seq == 1 {
        return None;
    }
    let mut window = ctx.live.open_question("the stream's first sequence");
    loop {
        let error = match jsapi::stream_info(client, &ctx.stream, ctx.api_timeout()).await {
            Ok(info) => return (info.view.state.first_seq != seq).then_some(info.view.state.first_seq),
            Err(e) => e.to_string(),
        };
        if ctx.cancel.is_cancelled() || !window.failed(&error, &ctx.cancel).await {
            history::unknown(Property::ReadSequenceGapFree, &json!({ "seq": seq, "last_error": error,
                "problem": "a consumer restarted from the stream's start delivered this sequence first; whether the stream starts there could not be learned" }));
            return None;
        }
    }
}

/// What a look-up of a sequence found.
struct Found {
    lookup: Lookup,
    /// The stream's first and last sequences when absence was confirmed (if it answered).
    stream_first: Option<u64>,
    stream_last: Option<u64>,
}

/// Looks a sequence up in the stream. `Absent` only when every answer for a whole quiet
/// period said so (a restarting node or deposed leader can answer from a stale view);
/// `None` when no such answer could be had within a liveness window (read it again).
async fn look_up(ctx: &Ctx, client: &async_nats::Client, seq: u64) -> Option<Found> {
    let mut confirm = Confirm::new(ctx.cfg.liveness.confirm_hold(), 3);
    let mut window = ctx.live.open_question("look up a sequence");
    let found = loop {
        let error = match jsapi::message_present(client, &ctx.stream, seq, ctx.api_timeout()).await {
            Ok(true) => break Some(Found { lookup: Lookup::Present, stream_first: None, stream_last: None }),
            Ok(false) => match confirm.observe(ctx.live.now(), true) {
                Confirmation::Confirmed { .. } => {
                    let info = jsapi::stream_info(client, &ctx.stream, ctx.api_timeout()).await;
                    let state = info.ok().map(|i| (i.view.state.first_seq, i.view.state.last_seq));
                    break Some(Found { lookup: Lookup::Absent, stream_first: state.map(|s| s.0), stream_last: state.map(|s| s.1) });
                }
                Confirmation::Pending { ask_quiet } => {
                    ctx.suspicions.open(Suspect::ReadMissing, &json!({ "seq": seq }));
                    if ask_quiet {
                        ctx.live.quiet.request(Why::Confirming, ctx.cfg.liveness.confirm_hold(), &format!("sequence {seq} absent, confirming"));
                    }
                    "absent, not yet for long enough".to_string()
                }
                Confirmation::Good => unreachable!("a bad observation never answers Good"),
            },
            Err(e) => e.to_string(),
        };
        if ctx.cancel.is_cancelled() || !window.failed(&error, &ctx.cancel).await {
            if !ctx.cancel.is_cancelled() {
                tracing::warn!(seq, error, "could not look up a sequence; reading it again instead of judging");
            }
            break None;
        }
    };
    if found.is_some() || !ctx.cancel.is_cancelled() {
        ctx.suspicions.close(Suspect::ReadMissing);
    }
    found
}

/// The reader is stuck below `target`: looks its next sequence up. Absent: the range
/// [`missing_to`] gives is reported lost (or skipped, above the last ack) and the reader
/// moves past it. Present, or no answer: nothing judged, the consumer is recreated.
async fn tail_look_up(ctx: &Ctx, client: &async_nats::Client, verifier: &mut ReadVerifier, target: u64) {
    let next = verifier.next_seq();
    let Some(Found { lookup: Lookup::Absent, stream_first, stream_last }) = look_up(ctx, client, next).await else { return };
    let last_acked = Stats::get(&ctx.stats.last_acked_seq);
    let mut to = missing_to(next, target, stream_first, stream_last);
    // One stream info answer says where the stream starts or ends; the range's far end is
    // confirmed absent like its first message before the whole range is called lost.
    if to > next && !matches!(look_up(ctx, client, to).await, Some(Found { lookup: Lookup::Absent, .. })) {
        to = next;
    }
    let mut v = judge_missing(next, to, Lookup::Absent, last_acked);
    v.details["stream_first_seq"] = json!(stream_first);
    v.details["stream_last_seq"] = json!(stream_last);
    v.details["observed_by"] = json!("the reader stalled below its target and looked its next sequence up");
    sdk::violation!(&v, [Property::ReadSequenceGapFree, Property::AckedMessageNeverLost]);
    ctx.record_lost(next, to.min(last_acked));
    verifier.skip_to(to + 1);
}
