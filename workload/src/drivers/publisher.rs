//! The ordered publisher.
//!
//! Message `i` goes out with `Nats-Msg-Id` `<run>-i`, its deterministic payload, the
//! payload's sha256 and `expected_last_sequence = i - 1`. Up to `in_flight` publishes
//! await their acks; acks are judged strictly in send order by the
//! [`PublishLedger`]. On anything but a clean ack the publisher gives up what is in flight
//! and rewinds to the first unconfirmed message, resending the same ids: the dedup window
//! turns a retry of a stored message into a duplicate ack carrying its original sequence.
//! The replies to the sends it gave up are still awaited and judged as they arrive: every
//! ack the server sends is judged.
//!
//! When the run's time is up it sends nothing new but goes on until every message it sent
//! is acknowledged (its publish window, if one is open, decides): a stall at the end of a
//! run is judged like one in its middle.

use crate::faults::quiet::Why;
use crate::sdk;
use crate::context::state::{Ctx, Stats, Suspect};
use async_nats::jetstream::context::{PublishAckFuture, PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::{self, message::PublishMessage};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use properties::confirm::{Confirm, Confirmation};
use properties::payload::{checksum, CHECKSUM_HEADER, MSG_ID_HEADER};
use properties::publish::{AckVerdict, LateAck, PublishLedger, Rejection};
use properties::Property;
use serde_json::json;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Replies to sends a rewind gave up, each with its message index. Every one ends: a
/// publish ack future times out (`publish.ack_timeout`) once polled.
type Late = FuturesUnordered<BoxFuture<'static, (u64, Result<PublishAck, PublishError>)>>;

/// Why the first unconfirmed message must be sent again.
struct Failure {
    error: String,
    kind: Option<PublishErrorKind>,
}

pub async fn run(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    // However it ends, the readers then know the last ack is final.
    let _done = ctx.published.clone().drop_guard();
    let client = ctx.connect("publisher").await?;
    let js = jetstream::ContextBuilder::new().timeout(ctx.cfg.publish.ack_timeout).build(client);
    let mut ledger = PublishLedger::new();
    let mut in_flight: VecDeque<(u64, PublishAckFuture)> = VecDeque::new();
    let mut next_send = 1u64;
    let mut window: Option<crate::context::retry::OpenWindow> = None;
    let mut leader_at_rewind = None;
    let mut behind = Confirm::new(ctx.cfg.liveness.confirm_hold(), 3);
    let mut late = Late::new();

    while !ctx.cancel.is_cancelled() {
        if ctx.live.finishing.is_cancelled() && in_flight.is_empty() && ledger.next_index() > Stats::get(&ctx.stats.sent_high) {
            break; // every message sent was acknowledged
        }
        let failure = match fill(&ctx, &js, &ledger, &mut in_flight, &mut next_send).await {
            Err(f) => f,
            Ok(()) => {
                let Some((index, ack)) = in_flight.pop_front() else { continue };
                let mut ack = std::pin::pin!(std::future::IntoFuture::into_future(ack));
                let reply = loop {
                    tokio::select! {
                        _ = ctx.cancel.cancelled() => break None,
                        reply = &mut ack => break Some(reply),
                        Some((i, reply)) = late.next(), if !late.is_empty() => judge_late(&ctx, &ledger, &mut behind, i, reply),
                    }
                };
                let Some(reply) = reply else { break };
                match judge(&ctx, &js, &mut ledger, &mut behind, index, reply).await {
                    Ok(duplicate) => {
                        if let Some(w) = window.take() {
                            // The first clean ack after resending: what did the retry meet?
                            w.succeeded();
                            let leader = ctx.view.stream_leader();
                            let details = json!({ "index": index, "duplicate": duplicate, "leader_then": leader_at_rewind, "leader_now": leader });
                            sdk::check!(Property::PublishRetryGotDuplicateAck, duplicate, &details);
                            sdk::check!(Property::AckAcrossLeaderChange, leader.is_some() && leader_at_rewind.is_some() && leader != leader_at_rewind, &details);
                        }
                        continue;
                    }
                    Err(f) => f,
                }
            }
        };
        // Rewind: everything after the first unconfirmed message is sent again; the replies
        // to what was in flight are still judged when they come.
        Stats::add(&ctx.stats.publish_failures, 1);
        Stats::add(&ctx.stats.rewinds, 1);
        late.extend(in_flight.drain(..).map(|(i, ack)| async move { (i, ack.await) }.boxed()));
        next_send = ledger.next_index();
        if window.is_none() {
            leader_at_rewind = ctx.view.stream_leader();
        }
        match failure.kind {
            Some(PublishErrorKind::StreamNotFound) => sdk::hold!(Property::PublishRetriedAfterNoResponders),
            Some(PublishErrorKind::TimedOut) => sdk::hold!(Property::PublishRetriedAfterTimeout),
            _ if failure.error.contains("10158") => sdk::hold!(Property::PublishRetriedWhileInProcess),
            _ => {}
        }
        tracing::debug!(index = next_send, error = %failure.error, "publish failed; resending from the first unconfirmed message");
        if let Ok(mut last) = ctx.stats.last_publish_error.lock() {
            last.clone_from(&failure.error);
        }
        if window.is_none() {
            if let Ok(mut first) = ctx.stats.first_publish_error.lock() {
                first.clone_from(&failure.error);
            }
        }
        let w = window.get_or_insert_with(|| ctx.live.open("publish", Property::PublishEventuallyAcked));
        let going = {
            let mut pause = std::pin::pin!(w.failed(&failure.error, &ctx.cancel));
            loop {
                tokio::select! {
                    going = &mut pause => break going,
                    Some((i, reply)) = late.next(), if !late.is_empty() => judge_late(&ctx, &ledger, &mut behind, i, reply),
                }
            }
        };
        if !going {
            Stats::add(&ctx.stats.liveness_windows_expired, 1);
            window = None;
            if ctx.live.finishing.is_cancelled() {
                break; // judged: the run's time is up
            }
        }
    }
    // The last replies to given-up sends, for as long as they take to arrive or time out.
    while let Some((i, reply)) = late.next().await {
        judge_late(&ctx, &ledger, &mut behind, i, reply);
    }
    Ok(())
}

/// Judges a reply to a send that a rewind gave up. An ack must name its message's own
/// sequence; a "wrong last sequence" answer can still contradict a "stream behind" streak.
fn judge_late(ctx: &Ctx, ledger: &PublishLedger, behind: &mut Confirm, index: u64, reply: Result<PublishAck, PublishError>) {
    match reply {
        Ok(ack) if ack.stream == ctx.stream => {
            Stats::add(&ctx.stats.late_acks, 1);
            match ledger.on_late_ack(index, ack.sequence, ack.duplicate) {
                LateAck::Consistent if ack.duplicate => sdk::hold!(Property::PublishDuplicateAckOriginalSequence),
                LateAck::Consistent => sdk::hold!(Property::PublishAckGapFree),
                LateAck::Unjudged => {}
                LateAck::Violation(v) => sdk::violation!(&v, [Property::PublishAckGapFree, Property::PublishDuplicateAckOriginalSequence, Property::AckedMessageNeverLost]),
            }
        }
        Ok(_) => {} // another stream's: nothing about ours
        Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
            if let Some(last) = reported_last_sequence(&e) {
                if ledger.on_wrong_last_sequence(last) != Rejection::Behind {
                    behind_refuted(ctx, behind);
                }
            }
        }
        Err(_) => {}
    }
}

/// An answer that contradicts "the stream ends before the last ack" ends that streak.
fn behind_refuted(ctx: &Ctx, behind: &mut Confirm) {
    behind.reset();
    ctx.suspicions.close(Suspect::PublishStreamBehind);
}

/// Sends until `in_flight` publishes await their acks.
async fn fill(
    ctx: &Ctx,
    js: &jetstream::Context,
    ledger: &PublishLedger,
    in_flight: &mut VecDeque<(u64, PublishAckFuture)>,
    next_send: &mut u64,
) -> Result<(), Failure> {
    // Once the run's time is up, only what was sent before is sent again.
    let last = if ctx.live.finishing.is_cancelled() { Stats::get(&ctx.stats.sent_high) } else { u64::MAX };
    while in_flight.len() < ctx.cfg.publish.in_flight && !ctx.cancel.is_cancelled() && *next_send <= last {
        let index = *next_send;
        let payload = ctx.run.payload(index);
        let mut msg = PublishMessage::build()
            .message_id(ctx.run.msg_id(index))
            .header(CHECKSUM_HEADER, checksum(&payload).as_str())
            .payload(Bytes::from(payload));
        if ctx.cfg.publish.expected_last_sequence {
            // In order, index i lives at sequence i: its predecessor is the stream's last.
            let expected_last = ledger.last_acked_seq() + (index - ledger.next_index());
            msg = msg.expected_last_sequence(expected_last);
        }
        let ack = js
            .send_publish(ctx.subject.clone(), msg)
            .await
            .map_err(|e| Failure { error: e.to_string(), kind: Some(e.kind()) })?;
        in_flight.push_back((index, ack));
        ctx.stats.sent_high.fetch_max(index, std::sync::atomic::Ordering::Relaxed);
        *next_send += 1;
    }
    Ok(())
}

/// Judges the reply to the oldest publish in flight. `Ok(duplicate)`: confirmed, go on.
async fn judge(
    ctx: &Ctx,
    js: &jetstream::Context,
    ledger: &mut PublishLedger,
    behind: &mut Confirm,
    index: u64,
    reply: Result<PublishAck, PublishError>,
) -> Result<bool, Failure> {
    let ack = match reply {
        Ok(ack) => ack,
        Err(e) => {
            if e.kind() == PublishErrorKind::WrongLastSequence {
                if let Some(last) = reported_last_sequence(&e) {
                    if let Some(seq) = wrong_last_sequence(ctx, js, ledger, behind, index, last).await {
                        // The server did not recognise the id, but the stream holds this
                        // very message (id and checksum) at the sequence its ack would have
                        // named: what a duplicate ack would have said, read instead.
                        Stats::add(&ctx.stats.acked_by_lookup, 1);
                        return confirmed(ctx, ledger, behind, index, seq, true);
                    }
                }
            }
            let error = match std::error::Error::source(&e) {
                Some(src) => format!("{e}: {src}"),
                None => e.to_string(),
            };
            return Err(Failure { error, kind: Some(e.kind()) });
        }
    };
    if ack.stream != ctx.stream {
        // Another stream captured our subject: nothing about ours can be concluded.
        return Err(Failure { error: format!("ack from stream {:?}, not {:?}", ack.stream, ctx.stream), kind: None });
    }
    confirmed(ctx, ledger, behind, index, ack.sequence, ack.duplicate)
}

/// Judges an ack of the oldest publish in flight (`seq`, a duplicate or not) in send order.
fn confirmed(ctx: &Ctx, ledger: &mut PublishLedger, behind: &mut Confirm, index: u64, seq: u64, duplicate: bool) -> Result<bool, Failure> {
    match ledger.on_ack(index, seq, duplicate) {
        AckVerdict::Fresh => sdk::hold!(Property::PublishAckGapFree),
        AckVerdict::Duplicate => {
            Stats::add(&ctx.stats.duplicate_acks, 1);
            sdk::hold!(Property::PublishDuplicateAckOriginalSequence);
        }
        AckVerdict::Unknown => {
            return Err(Failure { error: "duplicate ack without a sequence (original still in flight)".into(), kind: None })
        }
        AckVerdict::Violation(v) => sdk::violation!(&v, [Property::PublishAckGapFree, Property::PublishDuplicateAckOriginalSequence, Property::AckedMessageNeverLost]),
    }
    behind_refuted(ctx, behind);
    Stats::add(&ctx.stats.acked, 1);
    ctx.stats.last_acked_seq.store(ledger.watermark(), Relaxed);
    ctx.stats.ack_diverged_at.store(ledger.diverged_at().unwrap_or(0), Relaxed);
    Ok(duplicate)
}

/// What a rejection for a wrong last sequence shows, judged without trusting one answer:
/// "the stream ends before the last ack" must hold for a confirmation period (a deposed
/// leader can answer from a stale view), and "something else sits after the last ack" is
/// looked up, since a new leader's dedup state can lag behind what it stored. When what
/// sits there is this very message (id and checksum), its sequence is returned: it is
/// stored where its ack would have said (a leader whose dedup state lost the id answered
/// so for a whole window, seen on 2.15.1: findings/README.md, dedup-lost-after-r1-evacuation).
async fn wrong_last_sequence(ctx: &Ctx, js: &jetstream::Context, ledger: &PublishLedger, behind: &mut Confirm, index: u64, last: u64) -> Option<u64> {
    match ledger.on_wrong_last_sequence(last) {
        Rejection::Transient => behind_refuted(ctx, behind),
        Rejection::Behind => match behind.observe(ctx.live.now(), true) {
            Confirmation::Confirmed { bad_for } => {
                sdk::violation!(&ledger.stream_behind(index, last, bad_for.as_secs_f64()), [Property::AckedMessageNeverLost]);
                behind_refuted(ctx, behind);
            }
            Confirmation::Pending { ask_quiet } => {
                ctx.suspicions.open(Suspect::PublishStreamBehind, &json!({ "index": index, "stream_last_seq": last, "last_acked_seq": ledger.watermark() }));
                if ask_quiet {
                    ctx.live.quiet.request(Why::Confirming, ctx.cfg.liveness.confirm_hold(), "publishes say the stream ends before the last ack");
                }
            }
            Confirmation::Good => {}
        },
        Rejection::Ahead { seq } => {
            behind_refuted(ctx, behind);
            let occupant = async { js.get_stream_no_info(&ctx.stream).await?.get_raw_message(seq).await.map_err(anyhow::Error::from) };
            match occupant.await {
                Ok(msg) => {
                    let id = msg.headers.get(MSG_ID_HEADER).map(|v| v.as_str().to_string());
                    let occupant_index = id.as_deref().and_then(|id| ctx.run.index_of(id));
                    match ledger.judge_occupant(index, seq, occupant_index, id.as_deref()) {
                        Some(v) => sdk::violation!(&v, [Property::PublishAckGapFree]),
                        None => {
                            Stats::add(&ctx.stats.dedup_lagged, 1);
                            let sum = msg.headers.get(CHECKSUM_HEADER).map(|v| v.as_str().to_string());
                            if sum.as_deref() == Some(checksum(&msg.payload).as_str()) && msg.payload.as_ref() == ctx.run.payload(index).as_slice() {
                                return Some(seq);
                            }
                        }
                    }
                }
                Err(e) => tracing::debug!(seq, "could not look up what follows the last ack: {e}"),
            }
        }
    }
    None
}

/// The stream's last sequence named in a 10071 rejection ("wrong last sequence: 42").
fn reported_last_sequence(e: &PublishError) -> Option<u64> {
    let text = std::error::Error::source(e)?.to_string();
    let rest = text.split("wrong last sequence:").nth(1)?;
    rest.trim_start().split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}
