//! The durable consumer, read beside the ordered reader: a durable pull consumer on the
//! run's stream with explicit acks, each confirmed by the server (a double ack), a short ack
//! wait and a replica count drawn per run (R1, or the stream's, which then scales with it).
//!
//! Every delivery is checked against what was published ([`DurableLedger`]); a few are left
//! unacknowledged on purpose so redelivery runs. A message delivered again after its ack was
//! confirmed is left alone: only if it then comes yet again was the ack undone
//! ([`Redeliveries`]). Every couple of seconds the consumer's own
//! account of its ack floor is judged against the confirmed acks and the deliveries; a bad
//! answer counts only once it outlives a quiet period, since a deposed leader can answer
//! from an old view. Every acknowledged message must reach the consumer in time
//! ([`DeliveryWatch`]: at least once, judged). When the run's time is up the consumer is
//! drained: it reads until every message acknowledged was received or reported late.
//! The ledger is handed to the final verification when it stops.

use crate::history;
use crate::drivers::catch_up::{CatchUp, Tick};
use crate::drivers::reader::Until;
use crate::faults::quiet::Why;
use crate::nats::jsapi::{self, ApiError};
use crate::random::Chooser;
use crate::sdk;
use crate::context::state::{Ctx, Stats, Suspect};
use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use properties::confirm::Confirmation;
use properties::durable::{one_server, ConsumerReplica, DeliveryCheck, Owed, DeliveryWatch, DurableLedger, FloorJudge, Handover, OneServer, Redeliveries, Redelivery};
use properties::payload::{CHECKSUM_HEADER, MSG_ID_HEADER};
use properties::{Outcome, Property, Violation};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The consumer's name on the run's stream.
pub const NAME: &str = "durable";
/// How often the consumer's ack floor is looked at.
const POLL: Duration = Duration::from_secs(2);
/// The server error code for a consumer that does not exist.
pub const CONSUMER_NOT_FOUND: u64 = 10014;
/// Acks whose confirmation was lost, kept to be sent again (the oldest dropped beyond it).
const UNCONFIRMED_KEPT: usize = 1024;

pub async fn run(ctx: Arc<Ctx>, mut choose: Chooser) -> anyhow::Result<()> {
    let client = ctx.connect("durable").await?;
    let replicas = choose.pick("durable consumer replicas", &ctx.cfg.durable.replicas);
    let mut ledger = DurableLedger::new(ctx.run.clone());
    let mut judge = FloorJudge::new(ctx.cfg.liveness.confirm_hold());
    let mut delivery = DeliveryWatch::new(ctx.cfg.window(), ctx.cfg.durable.ack_wait);
    let result = drive(&ctx, &client, &mut choose, replicas, &mut ledger, &mut judge, &mut delivery).await;
    *ctx.durable.lock().unwrap_or_else(|p| p.into_inner()) = Some(Handover { ledger, judge, delivery });
    result
}

fn config(ctx: &Ctx, replicas: usize) -> pull::Config {
    pull::Config {
        durable_name: Some(NAME.into()),
        ack_policy: AckPolicy::Explicit,
        ack_wait: ctx.cfg.durable.ack_wait,
        // Never reached: a message past it would leave pending without an ack.
        max_deliver: 1_000_000,
        filter_subject: ctx.subject.clone(),
        num_replicas: replicas,
        max_ack_pending: 10_000,
        ..Default::default()
    }
}

async fn drive(
    ctx: &Ctx,
    client: &async_nats::Client,
    choose: &mut Chooser,
    replicas: usize,
    ledger: &mut DurableLedger,
    judge: &mut FloorJudge,
    delivery: &mut DeliveryWatch,
) -> anyhow::Result<()> {
    let js = jetstream::ContextBuilder::new().timeout(ctx.api_timeout()).build(client.clone());
    let create = || async { js.get_stream_no_info(&ctx.stream).await?.create_consumer(config(ctx, replicas)).await.map_err(anyhow::Error::from) };
    if ctx.live.retry("create the durable consumer", Property::DurableEventuallyCatchesUp, &ctx.cancel, create).await.is_none() {
        return Ok(());
    }
    tracing::info!(replicas, "durable consumer created");
    // When the consumer last changed (made, a new leader): what was pending comes again
    // only after an ack wait, so a message's delivery deadline counts from then at the earliest.
    let mut changed_at = ctx.live.now();
    // The highest sequence delivered so far (for the delivery clock an undo is timed by).
    let mut max_delivered = 0u64;
    let cap = ctx.cfg.durable.acks_in_flight;
    let mut acks = FuturesUnordered::new();
    // Of `acks`, the resends of acks left unanswered: they have `cap` slots of their own,
    // so neither kind starves the other (a soak's consumer, reset with its server, had 64
    // acks the new state could never answer resent forever in every slot, and was given
    // nothing more for the rest of the run). A resend task that cannot answer (only at
    // shutdown) is never counted down, hence the saturating difference below.
    let mut resends = 0usize;
    let mut catch_up = CatchUp::new(Property::DurableEventuallyCatchesUp, false);
    let mut poll = tokio::time::interval(POLL);
    // A look can wait 5 s for a stopped server; the ticks missed meanwhile are not made up in
    // a burst of looks, each of which could wait as long again while deliveries pile up.
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leader: Option<String> = None;
    // Sequences left unacknowledged on purpose, until they come again.
    // Deliveries left unacknowledged on purpose, with when (run time) each was left.
    let mut skipped: Vec<(u64, Duration)> = Vec::new();
    // Fresh deliveries to acknowledge before the next one left alone: one draw per skip
    // (under Antithesis a draw is an SDK call and an event; one per delivery was ~10^5).
    let skip_gap = |choose: &mut Chooser| choose.gap("fresh deliveries before the next one left unacknowledged", ctx.cfg.durable.skip_ack_probability);
    let mut until_skip = skip_gap(choose);
    let mut redeliveries = Redeliveries::default();
    // Acks the server left unanswered, with their reply subjects: each is sent again at the
    // next look. The undo check judges the server's floor against the *contiguous* confirmed
    // prefix, so one lost confirmation of an ack the server did take (and so never
    // redelivers) would hold that prefix still for the rest of the run. A server answers a
    // repeated double ack of a message it holds acked (measured on 2.15.1, R1 and R3) and
    // not one above what it delivered, so an answer is its word that the ack is taken.
    let mut unconfirmed: std::collections::VecDeque<(u64, async_nats::Subject)> = Default::default();

    'consumer: while !ctx.cancel.is_cancelled() {
        let open = || async {
            let stream = js.get_stream_no_info(&ctx.stream).await?;
            let consumer: jetstream::consumer::PullConsumer = stream.get_consumer(NAME).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            // Pull requests do not survive a consumer leader change: the client notices by
            // two missed heartbeats, so they are short (a 5 s heartbeat left the consumer
            // idle 10 s after every consumer leader change).
            consumer.stream().max_messages_per_batch(256).heartbeat(Duration::from_secs(1)).expires(Duration::from_secs(30)).messages().await.map_err(anyhow::Error::from)
        };
        let mut window = ctx.live.open("pull from the durable consumer", Property::DurableEventuallyCatchesUp);
        let mut messages = loop {
            let error = match open().await {
                Ok(messages) => break messages,
                Err(e) => e.to_string(),
            };
            if let Look::Gone = look(judge, ctx, client, ledger).await {
                redeliveries.clear();
                unconfirmed.clear();
                anew(ctx, ledger, delivery, &mut skipped, &create).await;
                changed_at = ctx.live.now();
            }
            if !window.failed(&error, &ctx.cancel).await {
                if ctx.live.finishing.is_cancelled() {
                    break 'consumer; // judged: the run's time is up
                }
                window = ctx.live.open("pull from the durable consumer", Property::DurableEventuallyCatchesUp);
            }
            if ctx.cancel.is_cancelled() {
                break 'consumer;
            }
        };
        // Open again: the window that any failed opens started is decided.
        window.succeeded();
        loop {
            tokio::select! {
                _ = ctx.cancel.cancelled() => break 'consumer,
                Some(done) = acks.next(), if !acks.is_empty() => {
                    // A task that cannot answer (only at shutdown) leaves its ack unconfirmed.
                    let Ok((seq, reply, confirmed, again)): Result<AckAnswer, _> = done else { continue };
                    resends -= usize::from(again);
                    if confirmed {
                        ledger.on_ack_confirmed(seq);
                        Stats::add(&ctx.stats.durable_acks_confirmed, 1);
                        Stats::add(&ctx.stats.durable_acks_confirmed_again, u64::from(again));
                    } else {
                        Stats::add(&ctx.stats.durable_acks_unconfirmed, u64::from(!again));
                        if unconfirmed.len() == UNCONFIRMED_KEPT {
                            unconfirmed.pop_front();
                            Stats::add(&ctx.stats.durable_acks_unconfirmed_dropped, 1);
                        }
                        unconfirmed.push_back((seq, reply));
                    }
                }
                _ = poll.tick() => {
                    match look(judge, ctx, client, ledger).await {
                        Look::Seen { leader: now, forgot_above } => {
                            if let Some(floor) = forgot_above {
                                unconfirmed.retain(|(seq, _)| *seq <= floor);
                            }
                            if leader != now {
                                tracing::info!(from = ?leader, to = ?now, acks_in_flight = acks.len(), received = ledger.received_floor(), confirmed = ledger.confirmed_floor(), "durable consumer leader changed");
                                changed_at = ctx.live.now();
                            }
                            if leader.as_ref().is_some_and(|l| Some(l) != now.as_ref()) {
                                let details = json!({ "from": leader, "to": now, "acks_in_flight": acks.len() });
                                sdk::check!(Property::DurableLeaderChangedWithAcksInFlight, !acks.is_empty(), &details);
                                sdk::above!(Property::DurableLeaderChangedWithManyAcksInFlight, acks.len() as u64, 32, &details);
                            }
                            leader = now;
                        }
                        Look::Gone => {
                            redeliveries.clear();
                            unconfirmed.clear();
                            anew(ctx, ledger, delivery, &mut skipped, &create).await;
                            changed_at = ctx.live.now();
                            continue 'consumer;
                        }
                        Look::Unanswered => {}
                    }
                    // Resends get as many slots again as deliveries: a consumer draining a
                    // backlog keeps every delivery slot taken, and a resend that waited for a
                    // free one could wait for the rest of the run (seen in CI with one slot).
                    for _ in 0..unconfirmed.len() {
                        if resends >= cap {
                            break;
                        }
                        let Some((seq, reply)) = unconfirmed.pop_front() else { break };
                        if !ledger.is_confirmed(seq) {
                            resends += 1;
                            acks.push(tokio::spawn(double_ack(client.clone(), ctx.api_timeout(), seq, reply, true)));
                        }
                    }
                    let races = redeliveries.expire(ctx.live.now(), 3 * ctx.cfg.durable.ack_wait);
                    Stats::add(&ctx.stats.durable_redelivery_races, races.len() as u64);
                    publish_received(ctx, ledger);
                    // What a stall's failure shows: the first sequence never delivered, the
                    // ones held back on purpose, and the consumer as last seen.
                    catch_up.consumer = json!({ "first_not_delivered": ledger.received_floor() + 1, "confirmed_floor": ledger.confirmed_floor(), "left_unacknowledged": skipped.len(),
                                                "lowest_left_unacknowledged": skipped.iter().map(|(seq, _)| seq).min(),
                                                "at_last_look": judge.last_look });
                    let last_acked = Stats::get(&ctx.stats.last_acked_seq);
                    let operated = ctx.ops.last_request(&ctx.stream).map(|t| t.saturating_duration_since(ctx.live.origin));
                    judge_delivery(ctx, ledger, judge, delivery, last_acked, changed_at.max(operated.unwrap_or_default()));
                    // How far it got: a message reported late stalls nothing twice. Any
                    // delivery is progress (redelivering what the server took back too): a
                    // single message withheld is at-least-once's to judge, not a stall.
                    let settled = delivery.settled_floor(ledger);
                    if ctx.live.finishing.is_cancelled() && ctx.published.is_cancelled() && settled >= last_acked {
                        catch_up.reached(settled);
                        break 'consumer; // drained: everything acknowledged was received (or reported late)
                    }
                    match catch_up.tick(ctx, Until::Cancelled, settled, Stats::get(&ctx.stats.durable_delivered)) {
                        Tick::Go => {}
                        Tick::Expired if ctx.live.finishing.is_cancelled() => break 'consumer,
                        Tick::Stalled { .. } | Tick::Expired => continue 'consumer,
                    }
                }
                next = messages.next(), if acks.len().saturating_sub(resends) < cap => {
                    let msg = match next {
                        Some(Ok(msg)) => msg,
                        Some(Err(e)) => {
                            tracing::debug!("durable consumer's pull ended: {e}");
                            continue 'consumer;
                        }
                        None => continue 'consumer,
                    };
                    let Ok(info) = msg.info() else {
                        sdk::check!(Property::DurableContentMatchesPublish, false, &json!({
                            "problem": "delivered message has no JetStream metadata", "subject": msg.subject.as_str() }));
                        continue;
                    };
                    let (seq, delivered) = (info.stream_sequence, info.delivered.max(0) as u64);
                    max_delivered = max_delivered.max(seq);
                    judge.delivered.sample(ctx.live.now(), max_delivered);
                    let header = |name: &str| msg.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str());
                    let violations = ledger.on_delivery(seq, header(MSG_ID_HEADER), header(CHECKSUM_HEADER), &msg.payload);
                    if violations.is_empty() {
                        sdk::hold!(Property::DurableContentMatchesPublish);
                    }
                    for v in &violations {
                        report_undone(judge, ctx, v).await;
                    }
                    Stats::add(&ctx.stats.durable_delivered, 1);
                    publish_received(ctx, ledger);
                    if delivered > 1 {
                        Stats::add(&ctx.stats.durable_redelivered, 1);
                    }
                    if ledger.is_confirmed(seq) {
                        match redeliveries.on_delivery(seq, delivered, ledger.confirmed_floor(), ctx.live.now(), ctx.cfg.durable.ack_wait) {
                            // Left alone: if the ack was really lost, it comes yet again.
                            Redelivery::Suspect => {
                                Stats::add(&ctx.stats.durable_confirmed_redelivered, 1);
                                continue;
                            }
                            Redelivery::Repeat => {
                                Stats::add(&ctx.stats.durable_redelivery_repeats, 1);
                                continue;
                            }
                            Redelivery::Undone(v) => {
                                report_undone(judge, ctx, &v).await;
                            }
                            Redelivery::Unwatched => {}
                        }
                    } else if let Some(i) = skipped.iter().position(|(s, _)| *s == seq) {
                        // A real redelivery comes again (delivered > 1) after ack_wait; one
                        // much sooner is a replay, not the server honouring the missing ack.
                        let since = ctx.live.now().saturating_sub(skipped[i].1);
                        let redelivered = delivered > 1 && since >= ctx.cfg.durable.ack_wait / 2;
                        sdk::check!(Property::DurableRedeliveredAfterUnacked, redelivered, &json!({ "seq": seq, "delivered": delivered, "since_left_ms": since.as_millis() as u64 }));
                        skipped.swap_remove(i);
                    } else if skipped.len() < 64 && !ctx.live.finishing.is_cancelled() {
                        if until_skip == 0 {
                            until_skip = skip_gap(choose);
                            skipped.push((seq, ctx.live.now()));
                            Stats::add(&ctx.stats.durable_acks_skipped, 1);
                            continue;
                        }
                        until_skip -= 1;
                    }
                    let Some(reply) = msg.reply.clone() else { continue };
                    acks.push(tokio::spawn(double_ack(client.clone(), ctx.api_timeout(), seq, reply, false)));
                }
            }
        }
    }
    Ok(())
}

/// An ack's sequence, its reply subject, whether the server confirmed it, and whether it
/// was a repeat.
type AckAnswer = (u64, async_nats::Subject, bool, bool);

/// Acks `seq` on its reply subject and waits for the server's confirmation (`again`: a
/// repeat of an ack left unanswered). Run as a task of its own, so its deadline holds while
/// the driver waits on a look: an answer that comes later is a lost confirmation.
async fn double_ack(client: async_nats::Client, timeout: Duration, seq: u64, reply: async_nats::Subject, again: bool) -> AckAnswer {
    // A confirmation is the server's empty reply; a no-responders status (which the client's
    // own double ack takes for one) is not.
    let answer = tokio::time::timeout(timeout, client.request(reply.clone(), "+ACK".into())).await;
    (seq, reply, matches!(answer, Ok(Ok(m)) if m.status.is_none()), again)
}

/// The consumer was confirmed gone (and reported, when any ack had been confirmed): it is
/// made anew, with a new ledger, so reading goes on.
async fn anew<F: std::future::Future<Output = anyhow::Result<jetstream::consumer::Consumer<pull::Config>>>>(
    ctx: &Ctx,
    ledger: &mut DurableLedger,
    delivery: &mut DeliveryWatch,
    skipped: &mut Vec<(u64, Duration)>,
    create: &impl Fn() -> F,
) {
    ledger.restart();
    delivery.restart();
    skipped.clear();
    Stats::add(&ctx.stats.durable_recreated, 1);
    let _ = ctx.live.retry("recreate the durable consumer", Property::DurableEventuallyCatchesUp, &ctx.cancel, create).await;
}

/// What one look at the consumer found.
enum Look {
    /// `forgot_above`: an undo of acks above this floor was excused (the state was lost
    /// with its server): acks sent before it and left unanswered are for deliveries the
    /// consumer no longer knows, and what they acked comes again.
    Seen { leader: Option<String>, forgot_above: Option<u64> },
    /// Confirmed gone (and reported if it had confirmed acks).
    Gone,
    Unanswered,
}

/// Reports an undone ack, unless its cause is in the run's own logs
/// ([`FloorJudge::crash_question`]: the consumer had a single replica within the last
/// liveness window, and a server that held it alone since the undone message was delivered
/// crashed, or was removed from the stream's or the consumer's peers by a PEER.REMOVE the
/// operator sent: "data is never lost unless explicitly performed by the user through a
/// stream/consumer delete or peer-removal", 2.15): those are counted, not failed, and true
/// is returned. An undo on a single server with neither fails, saying so.
async fn report_undone(judge: &mut FloorJudge, ctx: &Ctx, v: &Violation) -> bool {
    let mut v = v.clone();
    if let Some(q) = judge.crash_question(&v, ctx.live.now(), ctx.cfg.liveness.recent()) {
        let mut cause = None;
        let since = ctx.live.origin + q.delivered_after;
        for server in &q.servers {
            cause = match crashed_since(ctx, server, q.delivered_after).await {
                Some(crash) => Some(json!({ "server": server, "crash": crash })),
                None => ctx.ops.removed_since(&ctx.stream, server, since).map(|(op, at)| {
                    json!({ "server": server, "removed_by": op.id(), "t_s": at.duration_since(ctx.live.origin).as_secs_f64() })
                }),
            };
            if cause.is_some() {
                break;
            }
        }
        match cause {
            Some(crash) => {
                let n = ctx.stats.durable_unreplicated_undone.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n < 3 {
                    tracing::warn!(details = %v.details, %crash, "acks confirmed by an unreplicated durable consumer were undone by a crash or a peer removal of its server (not a violation: see docs/durable-consumer.md)");
                }
                return true;
            }
            None => {
                v.details["single_replica_on"] = json!(q.server);
                v.details["single_replica_on_since_delivery"] = json!(q.servers);
                v.details["delivered_after_s"] = json!(q.delivered_after.as_secs_f64());
                v.details["crash_seen"] = json!(false);
                v.details["peer_removed"] = json!(false);
            }
        }
    }
    v.details["consumer_at_last_look"] = judge.last_look.clone();
    sdk::violation!(&v, [Property::DurableAckNeverUndone, Property::DurableNothingSkipped, Property::DurableContentMatchesPublish]);
    judge.failed += 1;
    false
}

/// Evidence that `server`'s process stopped after `after` (run time): a fault that stops a
/// process on it in the fault log (local and docker runs), its `/varz` start time later
/// than `after`, or no node naming it any more (wiped and renamed). None: no crash seen.
async fn crashed_since(ctx: &Ctx, server: &str, after: Duration) -> Option<Value> {
    if let Some(log) = &ctx.faults {
        let events = log.events.lock().map(|e| e.clone()).unwrap_or_default();
        if let Some(e) = events.iter().find(|e| e.event == "start" && e.kind.stops_the_process() && e.t_s >= after.as_secs_f64() && e.nodes.iter().any(|n| n == server)) {
            return Some(json!({ "fault": e.kind, "t_s": e.t_s }));
        }
    }
    let http = crate::nats::monitor::http_client();
    let origin = std::time::SystemTime::now().checked_sub(ctx.live.origin.elapsed())?;
    let mut answered = 0;
    for url in &ctx.cluster.monitor_urls {
        let Ok(varz) = crate::nats::monitor::get_json(&http, &format!("{url}/varz")).await else { continue };
        answered += 1;
        if varz["server_name"].as_str() != Some(server) {
            continue;
        }
        let started = varz_start(&varz)?;
        let started_s = started.duration_since(origin).ok()?;
        return (started_s > after).then(|| json!({ "restarted_at_s": started_s.as_secs_f64() }));
    }
    (answered > 0 && answered == ctx.cluster.monitor_urls.len()).then(|| json!({ "gone": "no node names it any more" }))
}

/// One look at the consumer: its ack floor, as its leader reports it, judged against the
/// ledger, and its existence; bad answers count once confirmed over a quiet period.
async fn look(judge: &mut FloorJudge, ctx: &Ctx, client: &async_nats::Client, ledger: &mut DurableLedger) -> Look {
    judge.acked.sample(ctx.live.now().as_secs_f64(), Stats::get(&ctx.stats.last_acked_seq));
    let info = jsapi::request(client, &format!("CONSUMER.INFO.{}.{NAME}", ctx.stream), &Value::Null, ctx.api_timeout()).await;
    let info = match info {
        Ok(info) => info,
        Err(e @ ApiError::Server { .. }) if e.err_code() == Some(CONSUMER_NOT_FOUND) => {
            return match observe_gone(judge, ctx) {
                Confirmation::Confirmed { bad_for } => {
                    if ledger.confirmed_floor() > 0 {
                        let mut v = self_gone(ledger);
                        v.details["gone_for_s"] = json!(bad_for.as_secs_f64());
                        report_undone(judge, ctx, &v).await;
                    }
                    judge.gone.reset();
                    Look::Gone
                }
                _ => Look::Unanswered,
            };
        }
        Err(_) => return Look::Unanswered,
    };
    judge.gone.reset();
    let leader = info.pointer("/cluster/leader").and_then(Value::as_str).map(str::to_string);
    let one = one_server(&info);
    ctx.view.saw_durable(if one == OneServer::No { None } else { leader.clone() });
    judge.saw(one, leader.as_deref(), ctx.live.now());
    judge.last_look = json!({ "t_s": ctx.live.now().as_secs_f64(), "leader": leader, "cluster": info.get("cluster"),
                             "ack_floor": info.get("ack_floor"), "delivered": info.get("delivered"), "num_ack_pending": info.get("num_ack_pending") });
    if leader.as_deref().is_none_or(str::is_empty) {
        // Without a leader, the answer is one replica's own stored state (a peer just
        // added holds none: 2.15.1 answered ack floor 0 for a leaderless R2 group); it
        // says nothing of what the consumer acknowledged.
        return Look::Unanswered;
    }
    let floor = info.pointer("/ack_floor/stream_seq").and_then(Value::as_u64).unwrap_or(0);
    if !account_for_absent(ctx, client, ledger, floor).await {
        // Whether the stream holds what the floor passed could not be learned: a look
        // that judges nothing (could not observe is not observed wrong).
        return Look::Unanswered;
    }
    let mut forgot_above = None;
    match ledger.judge_ack_floor(floor) {
        None => {
            judge.floor.reset();
            ctx.suspicions.close(Suspect::DurableAckFloor);
            sdk::hold!(Property::DurableAckNeverUndone);
            sdk::hold!(Property::DurableNothingSkipped);
        }
        Some(mut v) => {
            v.details["leader"] = json!(leader);
            if let Some(never) = v.details["never_delivered"].as_u64() {
                // `account_for_absent` found the run's message stored there at this look.
                v.details["stream_holds_it"] = json!(true);
                v.details["never_delivered_acked_between_s"] = json!(judge.acked.acked_between(never).map(|(a, b)| [a, b]));
                v.details["alone_on_since_acked"] = json!(judge.alone_since_acked(never));
            }
            match judge.floor.observe(ctx.live.now(), true) {
                Confirmation::Confirmed { bad_for } => {
                    v.details["bad_for_s"] = json!(bad_for.as_secs_f64());
                    let excused = report_undone(judge, ctx, &v).await;
                    if v.property == Property::DurableNothingSkipped {
                        // Reported once; what it passed is still owed to the consumer and
                        // followed to whether it ever comes (at-least-once judges that).
                        ledger.passed_by_floor(floor);
                    } else if excused {
                        // Judged once: a floor the server leaves there (2.14.6 kept 1,566
                        // under 1,679 with nothing pending) is not failed once the spell
                        // is older than a window.
                        ledger.forget_confirmed_above(floor);
                        forgot_above = Some(floor);
                    }
                    judge.floor.reset();
                    ctx.suspicions.close(Suspect::DurableAckFloor);
                }
                Confirmation::Pending { ask_quiet } => {
                    ctx.suspicions.open(Suspect::DurableAckFloor, &v.details);
                    if ask_quiet {
                        ctx.live.quiet.request(Why::Confirming, ctx.cfg.liveness.confirm_hold(), "the durable consumer's ack floor disagrees with its confirmed acks");
                    }
                }
                Confirmation::Good => {}
            }
        }
    }
    Look::Seen { leader, forgot_above }
}

/// At least once, judged at each look: the oldest message owed must have come within its
/// deadline ([`DeliveryWatch`]). A late one names the messages never received (and whether
/// the ack floor passed them) with how long the first waited.
fn judge_delivery(ctx: &Ctx, ledger: &DurableLedger, judge: &FloorJudge, delivery: &mut DeliveryWatch, last_acked: u64, changed_at: Duration) {
    let acked_at = |seq| judge.acked.acked_between(seq).map(|(_, by)| Duration::from_secs_f64(by));
    // Where its leader said it got to, from a look at most a quiet part old (an older one
    // would hold the clock back for as long as looks go unanswered).
    let server_delivered = judge.recent_delivered(ctx.live.now(), ctx.cfg.liveness.quiet);
    match delivery.observe(ctx.live.now(), ledger, last_acked, acked_at, changed_at, server_delivered) {
        DeliveryCheck::Fine => {}
        DeliveryCheck::Held { seq, waited } => {
            sdk::check!(Property::DurableEveryMessageDelivered, true, &json!({ "seq": seq, "waited_s": waited.as_secs_f64() }));
        }
        DeliveryCheck::AskQuiet { seq } => {
            ctx.live.quiet.request(Why::WindowQuietPoint, ctx.cfg.liveness.quiet, &format!("the durable consumer owes sequence {seq} for most of its deadline"));
        }
        DeliveryCheck::Late { from, to, waited } => {
            Stats::add(&ctx.stats.liveness_windows_expired, 1);
            let never = ledger.never_received(to, 8);
            sdk::check!(Property::DurableEveryMessageDelivered, false, &json!({
                "first_late": from, "last_late": to, "waited_s": waited.as_secs_f64(),
                "never_received": never, "acked_between_s": judge.acked.acked_between(from).map(|(a, b)| [a, b]),
                "deadline_s": (ctx.cfg.durable.ack_wait + ctx.cfg.liveness.window).as_secs_f64(),
                "floor_passed_it": ledger.was_passed(from),
                "alone_on_since_acked": judge.alone_since_acked(from),
                "received_floor": ledger.received_floor(), "consumer_at_last_look": judge.last_look,
                "problem": "acknowledged messages still stored were not delivered to the durable consumer within its ack wait plus the liveness window" }));
        }
    }
}

/// How far the consumer received everything, and the highest it received, for the
/// progress lines, the operator and the outage meter.
fn publish_received(ctx: &Ctx, ledger: &DurableLedger) {
    ctx.stats.durable_received.store(ledger.received_floor(), std::sync::atomic::Ordering::Relaxed);
    ctx.stats.durable_received_high.store(ledger.received_high(), std::sync::atomic::Ordering::Relaxed);
}

/// One "consumer not found" answer, confirmed over time.
fn observe_gone(judge: &mut FloorJudge, ctx: &Ctx) -> Confirmation {
    let c = judge.gone.observe(ctx.live.now(), true);
    if let Confirmation::Pending { ask_quiet: true } = c {
        ctx.live.quiet.request(Why::Confirming, ctx.cfg.liveness.confirm_hold(), "durable consumer not found");
    }
    c
}

/// Sequences below the ack floor never delivered: those the stream no longer holds (below
/// its first sequence, or looked up and absent) and other subjects' messages are accounted
/// for, so only a message of the run still stored counts as skipped. A bounded number of
/// look-ups per look. False when a look-up got no answer: the floor cannot be judged now.
async fn account_for_absent(ctx: &Ctx, client: &async_nats::Client, ledger: &mut DurableLedger, floor: u64) -> bool {
    let Some(Violation { property: Property::DurableNothingSkipped, details }) = ledger.judge_ack_floor(floor) else { return true };
    let Some(missing) = details["never_delivered"].as_u64() else { return true };
    match jsapi::stream_info(client, &ctx.stream, ctx.api_timeout()).await {
        Ok(info) if missing < info.view.state.first_seq => ledger.not_for_it(missing, (info.view.state.first_seq - 1).min(floor)),
        Ok(_) => {}
        Err(_) => return false,
    }
    for _ in 0..100 {
        let Some(Violation { property: Property::DurableNothingSkipped, details }) = ledger.judge_ack_floor(floor) else { return true };
        let Some(missing) = details["never_delivered"].as_u64() else { return true };
        let found = jsapi::request(client, &format!("STREAM.MSG.GET.{}", ctx.stream), &json!({ "seq": missing }), ctx.api_timeout()).await;
        match found {
            Err(e) if e.err_code() == Some(jsapi::NO_MESSAGE_FOUND) => {
                Stats::add(&ctx.stats.durable_absent_passed, 1);
                ledger.not_for_it(missing, missing);
            }
            // Another subject's message: the consumer's filter passes it by, rightly.
            Ok(m) if m.pointer("/message/subject").and_then(Value::as_str).is_some_and(|s| s != ctx.subject) => {
                ledger.not_for_it(missing, missing);
            }
            // The run's message, still stored: passing it is a skip.
            Ok(_) => return true,
            Err(_) => return false,
        }
    }
    false // more to look up than one look does: the next look goes on
}

fn self_gone(ledger: &DurableLedger) -> Violation {
    Violation::new(Property::DurableAckNeverUndone, json!({ "confirmed_floor": ledger.confirmed_floor(),
        "problem": "the durable consumer no longer exists, so every ack it had confirmed is undone" }))
}

/// The final verification's question, with faults paused: does the consumer's ack floor
/// still agree with every ack it confirmed and every delivery? Looks until an answer holds
/// (good) or is confirmed bad, for at most a liveness window. With it, what became of the
/// messages owed to the consumer (reported late, passed by its floor).
pub async fn final_check(ctx: &Ctx, client: &async_nats::Client) -> Option<(Outcome, Owed)> {
    let handover = ctx.durable.lock().unwrap_or_else(|p| p.into_inner()).take()?;
    let owed = handover.owed();
    if owed.late.late > 0 || owed.skipped.passed > 0 {
        tracing::warn!(?owed, "messages owed to the durable consumer: reported late, or passed by its ack floor");
    }
    Some((floor_check(ctx, client, handover).await, owed))
}

async fn floor_check(ctx: &Ctx, client: &async_nats::Client, handover: Handover) -> Outcome {
    let Handover { mut ledger, mut judge, .. } = handover;
    let before = judge.failed;
    let deadline = tokio::time::Instant::now() + ctx.cfg.liveness.window;
    while tokio::time::Instant::now() < deadline {
        let look = look(&mut judge, ctx, client, &mut ledger).await;
        if judge.failed > before {
            return Outcome::Failed;
        }
        if matches!(look, Look::Gone) {
            // Gone before any ack was confirmed: nothing it promised can be judged.
            return Outcome::Unknown;
        }
        if matches!(look, Look::Seen { .. }) && judge.floor.bad_count() == 0 {
            return replicas_at_rest(ctx, client).await;
        }
        tokio::time::sleep(POLL).await;
    }
    history::unknown(Property::DurableAckNeverUndone, &json!({ "observed_by": "final verification: the durable consumer's state could not be read for a whole window" }));
    Outcome::Unknown
}

/// With nothing reading or acking any more: does every replica of the consumer store the
/// leader's delivered sequence and ack floor? Asked until they agree, for at most a
/// liveness window; still different then fails `durable-replicas-agree-at-rest`, never
/// compared (no leader, a replica not current, a node not answering) is unknown.
async fn replicas_at_rest(ctx: &Ctx, client: &async_nats::Client) -> Outcome {
    let mut probe = crate::nats::replicas::ReplicaProbe::new(&ctx.cluster.monitor_urls);
    if !probe.enabled() {
        return Outcome::Held; // the floor held; nothing to compare replicas with
    }
    let mut window = ctx.live.open_question("durable consumer replicas agree");
    let last = loop {
        let look = compare_replicas(ctx, client, &mut probe).await;
        if let Ok(states) = &look {
            if properties::durable::replicas_at_rest(&states[0], &states[1..]).is_ok() {
                sdk::hold!(Property::DurableReplicasAgreeAtRest);
                return Outcome::Held;
            }
        }
        let why = look.as_ref().err().cloned().unwrap_or_else(|| "replicas differ".into());
        if ctx.cancel.is_cancelled() || !window.failed(&why, &ctx.cancel).await {
            break look;
        }
    };
    match last {
        Ok(states) => {
            let differ = properties::durable::replicas_at_rest(&states[0], &states[1..]).err();
            sdk::check!(Property::DurableReplicasAgreeAtRest, false, &json!({ "leader": states[0], "differ": differ,
                "problem": "replicas of the durable consumer still store another delivered sequence or ack floor than its leader after a liveness window at rest" }));
            Outcome::Failed
        }
        Err(why) => {
            history::unknown(Property::DurableReplicasAgreeAtRest, &json!({ "problem": "the durable consumer's replicas could not be compared within a liveness window", "last_look": why }));
            Outcome::Unknown
        }
    }
}

/// When a server's process started, from its `/varz` (`"start": "2026-12-06T17:27:23.123456789Z"`).
fn varz_start(varz: &Value) -> Option<std::time::SystemTime> {
    humantime::parse_rfc3339_weak(varz["start"].as_str()?).ok()
}

/// The durable consumer's info: the view settle checks read, and the raw reply.
pub async fn consumer_info(ctx: &Ctx, client: &async_nats::Client) -> Result<(properties::scale::StreamInfoView, Value), ApiError> {
    let raw = jsapi::request(client, &format!("CONSUMER.INFO.{}.{NAME}", ctx.stream), &Value::Null, ctx.api_timeout()).await?;
    let view = serde_json::from_value(raw.clone()).map_err(|e| ApiError::Decode(e.to_string()))?;
    Ok((view, raw))
}

/// Each replica's own state, the leader's first; `Err` when they cannot all be read now.
async fn compare_replicas(ctx: &Ctx, client: &async_nats::Client, probe: &mut crate::nats::replicas::ReplicaProbe) -> Result<Vec<ConsumerReplica>, String> {
    let (view, _) = consumer_info(ctx, client).await.map_err(|e| e.to_string())?;
    let cluster = view.cluster.as_ref().ok_or("no cluster information")?;
    let leader = cluster.leader.clone().filter(|l| !l.is_empty()).ok_or("no leader")?;
    if let Some(r) = cluster.replicas.iter().find(|r| !r.current || r.offline) {
        return Err(format!("replica {} not current", r.name));
    }
    let mut states = Vec::new();
    for peer in std::iter::once(&leader).chain(cluster.replicas.iter().map(|r| &r.name)) {
        match probe.consumer_on(peer, &ctx.stream, NAME).await? {
            Some(state) => states.push(state),
            None => return Err(format!("{peer} holds no replica of the consumer although its leader lists it")),
        }
    }
    Ok(states)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_start_time_is_read_from_varz() {
        let t = varz_start(&json!({ "start": "2026-12-06T17:27:23.123456789Z" })).unwrap();
        let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!((secs - 1_796_578_043.123_456_8).abs() < 1e-3, "{secs}");
        assert_eq!(varz_start(&json!({ "start": 5 })), None);
    }
}
