//! The checksum-verifying ordered reader, used by the live consumer and the final read.
//!
//! An async-nats ordered consumer (ephemeral, R1, no ack) delivers the stream from a start
//! sequence and recreates itself on consumer-sequence gaps. It never checks STREAM
//! sequences, so the [`ReadVerifier`] does. When a stream sequence is skipped, the missing
//! one is looked up in the stream before judging: present means the delivery skipped it,
//! absent (confirmed over time) means it is gone.

use crate::jsapi;
use crate::sdk;
use crate::state::{Ctx, Stats};
use async_nats::jetstream::{self, consumer::pull::OrderedConfig, consumer::DeliverPolicy};
use futures::StreamExt;
use properties::confirm::{Confirm, Confirmation};
use properties::liveness::{Next, Window};
use properties::payload::{CHECKSUM_HEADER, MSG_ID_HEADER};
use properties::read::{judge_missing, Lookup, ReadOutcome, ReadVerifier};
use properties::Property;
use serde_json::json;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Where the reader stops.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// Follow the publisher until cancelled, catching up to its last ack again and again.
    Cancelled,
    /// Read up to this sequence (the final read), then return.
    Seq(u64),
}

/// Reads and verifies from sequence 1. `verified` counts verified messages.
/// Returns the verifier's next sequence when done (or cancelled).
pub async fn read(ctx: &Ctx, until: Until, verified: &AtomicU64) -> anyhow::Result<u64> {
    let client = ctx.connect("reader").await?;
    let js = jetstream::ContextBuilder::new().timeout(ctx.api_timeout()).build(client.clone());
    let mut verifier = ReadVerifier::new(ctx.run.clone(), 1);
    let mut catch_up = CatchUp::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));

    'consumer: loop {
        if done(ctx, until, &verifier) {
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
            anyhow::Ok(consumer.messages().await?)
        };
        let mut consumer_name = String::new();
        let Some(mut messages) = ctx
            .live
            .retry("create ordered consumer", Property::ConsumerEventuallyCatchesUp, &ctx.cancel, create)
            .await
        else {
            return Ok(verifier.next_seq());
        };

        loop {
            let next = tokio::select! {
                _ = ctx.cancel.cancelled() => return Ok(verifier.next_seq()),
                _ = tick.tick() => {
                    match catch_up.tick(ctx, until, &verifier) {
                        Tick::Go => {}
                        Tick::Recreate => {
                            // Faults pause now: a consumer stuck since the last fault would
                            // wait two missed heartbeats (30 s) before the client replaces it.
                            recreated(ctx, "quiet period started while behind");
                            continue 'consumer;
                        }
                        Tick::Expired if ctx.live.give_up => return Ok(verifier.next_seq()),
                        Tick::Expired => {
                            recreated(ctx, "no progress for a whole liveness window");
                            continue 'consumer;
                        }
                    }
                    if done(ctx, until, &verifier) {
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
            let seq = match msg.info() {
                Ok(info) => {
                    // async-nats recreates an ordered consumer by itself (on consumer
                    // sequence gaps, missed heartbeats, a deleted consumer) under a new
                    // name: a new name on a delivery is that recreation.
                    if consumer_name != info.consumer {
                        if !consumer_name.is_empty() {
                            recreated(ctx, "the client recreated the ordered consumer");
                        }
                        consumer_name = info.consumer.to_string();
                    }
                    info.stream_sequence
                }
                Err(e) => {
                    sdk::check(Property::ReadOnlyPublishedMessages, false, &json!({
                        "problem": "delivered message has no JetStream metadata", "error": e.to_string(),
                        "subject": msg.subject.as_str() }));
                    continue;
                }
            };
            let header = |name: &str| msg.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str().to_string());
            let (id, sum) = (header(MSG_ID_HEADER), header(CHECKSUM_HEADER));
            match verifier.check(seq, id.as_deref(), sum.as_deref(), &msg.payload) {
                ReadOutcome::Verified => {
                    Stats::add(verified, 1);
                    for p in [Property::ReadSequenceGapFree, Property::ReadContentMatchesPublish, Property::ReadOnlyPublishedMessages] {
                        sdk::hold(p);
                    }
                    if done(ctx, until, &verifier) {
                        return Ok(verifier.next_seq());
                    }
                }
                ReadOutcome::Violations(vs) => vs.iter().for_each(sdk::violation),
                ReadOutcome::Behind { violation } => {
                    if let Some(v) = violation {
                        sdk::violation(&v);
                    }
                    // The client restarted the consumer from the stream's start (it does
                    // so when it recreates one that had delivered nothing): resume ours.
                    Stats::add(&ctx.stats.redeliveries, 1);
                    recreated(ctx, "an already verified sequence was delivered again");
                    continue 'consumer;
                }
                ReadOutcome::Gap { from, to } => {
                    match look_up(ctx, &client, from).await {
                        None => {} // could not observe: no judgment, read the gap again
                        Some(found) => {
                            let last_acked = Stats::get(&ctx.stats.last_acked_seq);
                            sdk::violation(&judge_missing(from, to, found, last_acked));
                            if found == Lookup::Absent {
                                verifier.skip_to(to + 1);
                            }
                        }
                    }
                    // Present or unknown: read from `from` again. Absent: go on after the hole.
                    recreated(ctx, "stream sequence gap");
                    continue 'consumer;
                }
            }
        }
    }
}

fn done(ctx: &Ctx, until: Until, verifier: &ReadVerifier) -> bool {
    match until {
        Until::Cancelled => ctx.cancel.is_cancelled(),
        Until::Seq(last) => verifier.consumed() >= last,
    }
}

fn recreated(ctx: &Ctx, why: &str) {
    tracing::debug!(why, "recreating the ordered consumer");
    Stats::add(&ctx.stats.consumer_recreates, 1);
    sdk::hold(Property::ConsumerRecreated);
}

/// Looks a skipped sequence up in the stream. `Absent` only when every answer for a whole
/// quiet period said so (a restarting node or deposed leader can answer from a stale view);
/// `None` when the stream could not be asked within a liveness window.
async fn look_up(ctx: &Ctx, client: &async_nats::Client, seq: u64) -> Option<Lookup> {
    let mut confirm = Confirm::new(ctx.cfg.liveness.quiet, 3);
    let mut window = Window::open(ctx.cfg.window(), ctx.live.now());
    loop {
        let pause = match jsapi::message_present(client, &ctx.stream, seq, ctx.api_timeout()).await {
            Ok(true) => return Some(Lookup::Present),
            Ok(false) => match confirm.observe(ctx.live.now(), true) {
                Confirmation::Confirmed { .. } => return Some(Lookup::Absent),
                Confirmation::Pending { ask_quiet } => {
                    if ask_quiet {
                        ctx.live.quiet.request(ctx.cfg.liveness.quiet, &format!("sequence {seq} skipped and absent"));
                    }
                    Duration::from_secs(1)
                }
                Confirmation::Good => unreachable!("a bad observation never answers Good"),
            },
            Err(e) => match window.failed(ctx.live.now()) {
                Next::Retry(p) => p,
                Next::RequestQuiet { quiet, retry_after } => {
                    ctx.live.quiet.request_for_window(quiet, "looking up a skipped sequence");
                    retry_after
                }
                Next::Expired { .. } => {
                    tracing::warn!(seq, error = %e, "could not look up a skipped sequence; reading it again instead of judging");
                    return None;
                }
            },
        };
        tokio::select! {
            _ = ctx.cancel.cancelled() => return None,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// The catch-up liveness rule: whenever the reader is behind, it must reach the sequence it
/// was behind (the last ack at that moment, or the final read's target) within a window.
#[derive(Default)]
struct CatchUp {
    target: Option<(u64, Window)>,
}

impl CatchUp {
    /// Once a second: says whether to go on, to recreate the consumer now that faults
    /// pause, or that a window ran out (reported).
    fn tick(&mut self, ctx: &Ctx, until: Until, verifier: &ReadVerifier) -> Tick {
        let now = ctx.live.now();
        let consumed = verifier.consumed();
        if let Some((target, w)) = &self.target {
            if consumed >= *target {
                sdk::check(Property::ConsumerEventuallyCatchesUp, true, &json!({ "target": target, "elapsed_s": w.elapsed(now).as_secs_f64() }));
                self.target = None;
            }
        }
        let goal = match until {
            Until::Cancelled => Stats::get(&ctx.stats.last_acked_seq),
            Until::Seq(last) => last,
        };
        let Some((target, w)) = &mut self.target else {
            if consumed < goal {
                self.target = Some((goal, Window::open(ctx.cfg.window(), now)));
            }
            return Tick::Go;
        };
        match w.failed(now) {
            Next::Retry(_) => Tick::Go,
            Next::RequestQuiet { quiet, .. } => {
                ctx.live.quiet.request_for_window(quiet, &format!("reader behind at {consumed} of {target}"));
                Tick::Recreate
            }
            Next::Expired { elapsed, .. } => {
                sdk::check(Property::ConsumerEventuallyCatchesUp, false, &json!({
                    "target": *target, "consumed": consumed, "elapsed_s": elapsed.as_secs_f64() }));
                Stats::add(&ctx.stats.liveness_windows_expired, 1);
                self.target = None;
                Tick::Expired
            }
        }
    }
}

enum Tick {
    Go,
    Recreate,
    Expired,
}
