//! The scale operation.
//!
//! It sends the stream's whole config back with a random replica count, sometimes
//! a second different count right away, and sometimes waits for the change to settle
//! (leader present, followers current, no pending desired state, every node's `/healthz`
//! green), timing it. The monitor looks at the stream every two seconds: it must exist and
//! hold at least every acknowledged message, each judged only when confirmed over time.

use crate::nats::monitor::{http_client, unhealthy};
use crate::nats::jsapi::{self, ApiError};
use crate::sdk;
use crate::context::state::{Ctx, Stats};
use properties::scale::settled;
use properties::Property;
use crate::random::Chooser;
use super::{note_settling, Settling};
use crate::context::retry::Failure;
use properties::operations::{servers_with, OpKind};
use serde_json::json;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// The scale operation's settings for one run.
pub struct Scaler {
    choices: Vec<usize>,
    flip: bool,
    back_to_back: f64,
    wait_probability: f64,
}

impl Scaler {
    pub fn new(ctx: &Ctx) -> Self {
        let schedule = ctx.cfg.schedule();
        Scaler {
            choices: ctx.cfg.scale_choices(ctx.cluster.size),
            flip: schedule.flip_replicas,
            back_to_back: ctx.cfg.scale.back_to_back_probability,
            wait_probability: schedule.wait_settled_probability.unwrap_or(ctx.cfg.scale.wait_settled_probability),
        }
    }

    /// One scale request (sometimes two back to back, sometimes waited for). `None` when
    /// stopped.
    pub async fn step(&mut self, ctx: &Ctx, client: &async_nats::Client, rng: &mut Chooser) -> Option<()> {
        let timeout = ctx.api_timeout();
        // While a placement is set, only counts it can hold are drawn (a correct server
        // refuses the others for good): without the stream's info, nothing is drawn.
        let Ok(info) = jsapi::stream_info(client, &ctx.stream, timeout).await else {
            ctx.ops.count(OpKind::Scale, |c| c.not_applicable += 1);
            return Some(());
        };
        let required = info.view.config.placement.required();
        let room = (!required.is_empty()).then(|| servers_with(&ctx.view.tags_of(), &required).len());
        let choices: Vec<usize> = self.choices.iter().copied().filter(|r| room.is_none_or(|n| *r <= n)).collect();
        if choices.is_empty() {
            ctx.ops.count(OpKind::Scale, |c| c.not_applicable += 1);
            return Some(());
        }
        note_settling(ctx, &info.view, OpKind::Scale);
        let mut target = if self.flip {
            // R1 <-> R(max): the switches where the known bugs live.
            let now = Stats::get(&ctx.stats.replicas) as usize;
            if now > 1 { 1 } else { choices.iter().copied().max().unwrap_or(1) }
        } else {
            rng.pick("replica count", &choices)
        };
        if target < info.view.config.num_replicas {
            if !super::drop_allowed(ctx, None, target) {
                ctx.ops.count(OpKind::Scale, |c| c.not_applicable += 1);
                return Some(());
            }
            super::consumer::note_stream_scale_down(ctx, client, &info.view).await;
        }
        let from = scale(ctx, client, target, timeout).await?;
        note_transition(ctx, from, target).await;
        if choices.len() > 1 && rng.chance("second request back to back", self.back_to_back) {
            let first = target;
            while target == first {
                target = rng.pick("second replica count", &choices);
            }
            if target < first && !super::drop_allowed(ctx, None, target) {
                return Some(());
            }
            scale(ctx, client, target, timeout).await?;
            sdk::hold!(Property::ScaleRequestedBackToBack);
            note_transition(ctx, first, target).await;
        }
        if rng.chance("wait until settled", self.wait_probability) {
            wait_settled(ctx, client, target).await;
        }
        Some(())
    }
}

/// Every request is an evaluation of the R1 switches, with its real condition: how often
/// they happen is what Antithesis sees.
async fn note_transition(ctx: &Ctx, from: usize, to: usize) {
    let details = json!({ "from": from, "to": to });
    sdk::check!(Property::StreamScaledDownToR1, from > 1 && to == 1, &details);
    sdk::check!(Property::StreamScaledUpFromR1, from == 1 && to > 1, &details);
    if to == 1 && !ctx.cluster.monitor_urls.is_empty() {
        let sick = unhealthy(&http_client(), &ctx.cluster.monitor_urls).await;
        let details = json!({ "from": from, "unhealthy": sick });
        sdk::check!(Property::ScaleToR1WhileANodeWasDown, !sick.is_empty(), &details);
        sdk::above!(Property::ScaleToR1WithSeveralNodesDown, sick.len() as u64, 1, &details);
    }
}

/// Requests `replicas`, retrying within liveness windows. Returns the count configured
/// before, or `None` when cancelled.
async fn scale(ctx: &Ctx, client: &async_nats::Client, replicas: usize, timeout: Duration) -> Option<usize> {
    // Once a move has been waited for, a stream that still refuses is retried in the scale's
    // own window (paced, and failing when it runs out), not waited for again at once.
    let waited = std::sync::atomic::AtomicBool::new(false);
    // The count before the first try (set as that try is sent): a try whose answer was lost
    // may have been applied, and the stream's configuration then says so. Asking again for
    // what already is can be refused for reasons of its own (a soak of 2026-12-07: 10005
    // "no suitable peers" for 53 s while a removed server's replacement was pending, the
    // stream at R4 all along), so the applied request counts as accepted.
    let first = std::sync::OnceLock::new();
    let attempt = || async {
        let info = jsapi::stream_info(client, &ctx.stream, timeout).await?;
        let sent = first.get().is_some();
        let before = *first.get_or_init(|| info.view.config.num_replicas);
        if sent && info.view.config.num_replicas == replicas {
            tracing::info!(replicas, "scale applied though its answer was lost: not asked again");
            return Ok(Some(before));
        }
        match jsapi::set_replicas(client, &ctx.stream, info.raw["config"].clone(), replicas, timeout).await {
            Err(e) if e.err_code() == Some(jsapi::STREAM_MOVE_IN_PROGRESS) && !waited.load(Relaxed) => Ok(None),
            Err(e) => Err(e),
            Ok(()) => Ok::<_, ApiError>(Some(before)),
        }
    };
    let before = loop {
        match ctx.live.retry("scale request", Property::ScaleEventuallySettles, &ctx.cancel, attempt).await? {
            Some(before) => break before,
            None => {
                wait_for_move(ctx, client, replicas).await?;
                waited.store(true, Relaxed);
            }
        }
    };
    Stats::add(&ctx.stats.scale_requests, 1);
    ctx.ops.count(OpKind::Scale, |c| c.done += 1);
    ctx.ops.record(&ctx.stream, OpKind::Scale, "requested", json!({ "from": before, "to": replicas }));
    ctx.stats.replicas.store(replicas as u64, Relaxed);
    ctx.view.peers_changing();
    Some(before)
}

/// A scale is refused while a move is carried out (10124), and copying a large stream to
/// its new peers under faults can take many windows: the move is waited for as the move's
/// own settling, where the copy's progress starts the window over, and the scale is asked
/// again once it has settled. `None` when stopped.
async fn wait_for_move(ctx: &Ctx, client: &async_nats::Client, replicas: usize) -> Option<()> {
    ctx.ops.record(&ctx.stream, OpKind::Scale, "waiting-for-move", json!({ "to": replicas }));
    super::until_settled(ctx, client, "move settle", Property::MoveEventuallySettles, |_| Ok(())).await.map(drop)
}

/// Waits until the stream has settled at `replicas` and every node is healthy.
pub async fn wait_settled(ctx: &Ctx, client: &async_nats::Client, replicas: usize) -> bool {
    let started = Instant::now();
    let settling = Settling::new(ctx);
    let check = || async {
        let info = jsapi::stream_info(client, &ctx.stream, ctx.api_timeout()).await.map_err(Failure::stalled)?;
        if info.view.config.num_replicas != replicas {
            // An earlier request that timed out for us can reach the meta leader after a
            // later one and undo it: the operator owns the count, so it asks again.
            let config = info.raw["config"].clone();
            jsapi::set_replicas(client, &ctx.stream, config, replicas, ctx.api_timeout()).await.map_err(Failure::stalled)?;
            Stats::add(&ctx.stats.scale_reissued, 1);
            ctx.ops.record(&ctx.stream, OpKind::Scale, "requested-again", json!({ "configured": info.view.config.num_replicas, "to": replicas }));
            return Err(Failure::stalled(format!("configured replicas {} != requested {replicas}: requested again", info.view.config.num_replicas)));
        }
        settling.judge(&info.view, settled(&info.view, replicas)).await
    };
    if ctx.live.retry_progressing("scale settle", Property::ScaleEventuallySettles, &ctx.cancel, check).await.is_none() {
        return false;
    }
    let ms = started.elapsed().as_millis() as u64;
    let slow = ctx.cfg.liveness.slow_settle().as_millis() as u64;
    sdk::above!(Property::ScaleSettledSlowly, ms, slow, &json!({ "replicas": replicas, "settle_ms": ms }));
    Stats::add(&ctx.stats.scales_settled, 1);
    Stats::add(&ctx.stats.settle_ms_total, ms);
    ctx.stats.settle_ms_max.fetch_max(ms, Relaxed);
    sdk::hold!(Property::ScaleWaitedUntilSettled);
    ctx.ops.record(&ctx.stream, OpKind::Scale, "settled", json!({ "replicas": replicas, "settle_ms": ms }));
    // Settled means the requested count of peers, all current: that is the effect.
    ctx.ops.count(OpKind::Scale, |c| {
        c.settled += 1;
        c.effect_seen += 1;
    });
    true
}
