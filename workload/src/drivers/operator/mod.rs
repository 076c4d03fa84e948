//! The operator: what an administrator does to a live JetStream cluster, while publishing
//! and reading go on. Every interval it draws one operation from a round holding each
//! operation the server supports (its version from INFO decides; what is never sent is
//! listed with the reason) as often as its weight, so every operation comes within about
//! one round ([`crate::round::Round`]), performs it, and sometimes waits for the stream to settle, judging the wait
//! with the operation's liveness property. Where the stream settles is judged by the
//! monitor ([`PlacementJudge`]).

pub mod consumer;
pub mod moves;
pub mod peers;
pub mod scale;
pub mod stepdown;

use crate::nats::monitor::{all_healthy, get_json, http_client};
use crate::nats::jsapi::{self, ApiError};
use crate::random::Chooser;
use crate::sdk;
use crate::context::state::{Ctx, Stats};
use properties::operations::{peers, placement_honoured, OpKind, Version, CLUSTER_TAG};
use crate::nats::replicas::ReplicaProbe;
use crate::context::retry::Failure;
use properties::scale::{settled, CatchUp, StreamInfoView};
use properties::{Outcome, Property};
use serde_json::{json, Value};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server answer that retrying will not change: any 4xx, and 10075 "peer remap failed"
/// (503, but no spare peer appears by asking again). Other 503s and transport errors are
/// transient: leaders being elected, JetStream temporarily unavailable.
fn refusal(e: &ApiError) -> Option<String> {
    match e {
        ApiError::Server { code, err_code, .. } if *code != 503 || *err_code == 10075 => Some(e.to_string()),
        _ => None,
    }
}

/// Sends `op`'s request until the server accepts it (true) or refuses it for good (false),
/// within liveness windows of `property`, and counts and logs which (`asked`: what the
/// request asks for, for the log). `None` when stopped.
pub async fn send<T, Fut: Future<Output = Result<T, ApiError>>>(ctx: &Ctx, op: OpKind, property: Property, asked: Value, mut f: impl FnMut() -> Fut) -> Option<bool> {
    let attempt = || {
        let fut = f();
        async move {
            match fut.await {
                Ok(_) => Ok(None),
                Err(e) => refusal(&e).map(Some).ok_or(e),
            }
        }
    };
    let refused = ctx.live.retry(op.id(), property, &ctx.cancel, attempt).await?;
    match &refused {
        Some(why) => ctx.ops.record(&ctx.stream, op, "refused", json!({ "asked": asked, "why": why })),
        None => ctx.ops.record(&ctx.stream, op, "requested", asked),
    }
    ctx.ops.count(op, |c| if refused.is_some() { c.refused += 1 } else { c.done += 1 });
    Some(refused.is_none())
}

/// The operator task.
pub async fn run(ctx: Arc<Ctx>, mut rng: Chooser) -> anyhow::Result<()> {
    let client = ctx.connect("operator").await?;
    let system = system_client(&ctx).await;
    let version = server_version(&ctx, &client).await;
    let parsed = Version::parse(&version);
    let mut ops = Vec::new();
    let weights = ctx.cfg.operator_weights();
    for op in OpKind::ALL {
        let weight = weights.of(op);
        match op.unsupported(parsed, system.is_some(), ctx.cfg.durable.enabled) {
            Some(why) if weight > 0 || op == OpKind::CancelMove => {
                tracing::info!(op = op.id(), server = %version, "operation not sent: {why}");
                ctx.ops.skip(op, why);
            }
            None if weight > 0 => ops.push((op, weight)),
            _ => {}
        }
    }
    if ops.is_empty() {
        return Ok(());
    }
    refresh_tags(&ctx).await;
    let mut round = crate::round::Round::weighted(&ops);
    let cancel_moves = !ctx.ops.skipped(OpKind::CancelMove);
    let (lo, hi) = (ctx.cfg.operator.interval_min, ctx.cfg.operator.interval_max);
    let mut scaler = scale::Scaler::new(&ctx);
    // When the run's time is up no new operation starts; the one under way is finished
    // (its waits decide their windows) before the operator ends.
    while !ctx.live.finishing.is_cancelled() {
        let pause = rng.between("pause before an operation", lo, hi);
        tokio::select! {
            _ = ctx.live.finishing.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
        refresh_tags(&ctx).await;
        let op = round.next(&mut rng, |_| true).unwrap_or(OpKind::Scale);
        let missed = ctx.ops.not_applicable(op);
        let wait = rng.chance("wait until settled", ctx.cfg.operator.wait_settled_probability);
        let carried_out = match op {
            OpKind::Scale => scaler.step(&ctx, &client, &mut rng).await,
            OpKind::Move => moves::step(&ctx, &client, &mut rng, cancel_moves, wait).await,
            OpKind::PeerRemove | OpKind::PeerEvacuate | OpKind::ServerEvacuate => {
                peers::step(&ctx, &client, system.as_ref().unwrap_or(&client), &mut rng, op, wait).await
            }
            OpKind::StreamStepdown => stepdown::stream(&ctx, &client, wait).await,
            OpKind::MetaStepdown => stepdown::meta(&ctx, system.as_ref().unwrap_or(&client), &client, wait).await,
            OpKind::ConsumerStepdown => consumer::stepdown(&ctx, &client, wait).await,
            OpKind::ConsumerScale => consumer::scale(&ctx, &client, &mut rng, wait).await,
            OpKind::ConsumerPeerRemove | OpKind::ConsumerPeerEvacuate => consumer::peer_step(&ctx, &client, &mut rng, op, wait).await,
            OpKind::CancelMove => Some(()),
        };
        if carried_out.is_none() {
            break; // stopped
        }
        if ctx.ops.not_applicable(op) > missed {
            round.later(op);
        }
    }
    Ok(())
}

/// The server's version: from a node's `/varz`, else from the connection's INFO once a
/// request has gone through (a connection made with retries returns before INFO came).
async fn server_version(ctx: &Ctx, client: &async_nats::Client) -> String {
    let http = http_client();
    for url in &ctx.cluster.monitor_urls {
        if let Some(v) = get_json(&http, &format!("{url}/varz")).await.ok().and_then(|v| v["version"].as_str().map(String::from)) {
            return v;
        }
    }
    let _ = jsapi::stream_info(client, &ctx.stream, ctx.api_timeout()).await;
    client.server_info().version
}

/// A connection to the system account, when the configuration names one.
pub(crate) async fn system_client(ctx: &Ctx) -> Option<async_nats::Client> {
    let user = ctx.cfg.operator.system_account()?;
    let name = format!("workload-{}-operator-system", ctx.run.run_id);
    let connect = crate::nats::jsapi::connect_as(&ctx.cluster.servers, &name, Some(user));
    tokio::select! {
        c = connect => c.inspect_err(|e| tracing::warn!("no system account connection: {e}")).ok(),
        _ = ctx.cancel.cancelled() => None,
    }
}

/// Learns each node's server name and tags (and cluster) from its `/varz`.
pub async fn refresh_tags(ctx: &Ctx) {
    let http = http_client();
    for (i, url) in ctx.cluster.monitor_urls.iter().enumerate() {
        let Ok(v) = get_json(&http, &format!("{url}/varz")).await else {
            ctx.view.missed_tags(i);
            continue;
        };
        if let Some(name) = v["server_name"].as_str() {
            let cluster = v["cluster"]["name"].as_str().map(|c| format!("{CLUSTER_TAG}{c}"));
            let tags = v["tags"].as_array().into_iter().flatten().filter_map(Value::as_str).map(String::from).chain(cluster).collect();
            ctx.view.saw_tags(i, name.to_string(), tags);
        } else {
            ctx.view.missed_tags(i);
        }
    }
}

/// A scale down or a `PEER.REMOVE` drops a peer (`peer`, or any for a scale down) before
/// anything replaces it: not while a fault destroys a copy (see
/// [`crate::nats::view::ClusterView::dropping`]). The turn lasts until the monitor sees the stream
/// at `target` peers, or two windows (a request that never took effect).
fn drop_allowed(ctx: &Ctx, peer: Option<&str>, target: usize) -> bool {
    ctx.view.dropping(peer, target, ctx.cfg.liveness.drop_turn())
}

/// The stream's info, or why not (for settle checks).
async fn info(ctx: &Ctx, client: &async_nats::Client) -> Result<jsapi::StreamInfo, String> {
    jsapi::stream_info(client, &ctx.stream, ctx.api_timeout()).await.map_err(|e| e.to_string())
}

/// How long a settled stream may sit outside its placement before that is a violation:
/// the config can change a moment before the server lists the new peers.
const PLACEMENT_GRACE: Duration = Duration::from_secs(15);

/// Judges where the stream is, look after look (the monitor's, every two seconds): a
/// placement violation counts once every look for `PLACEMENT_GRACE` found the stream
/// settled outside its placement; a look at an unsettled stream starts it over, and a look
/// whose peers' tags cannot be learned judges nothing.
#[derive(Default)]
pub struct PlacementJudge {
    violated_since: Option<Instant>,
}

impl PlacementJudge {
    pub async fn look(&mut self, ctx: &Ctx, view: &StreamInfoView) {
        if settled(view, view.config.num_replicas).is_err() {
            self.violated_since = None;
            return;
        }
        let (mut outcome, mut why) = placement_honoured(view, &ctx.view.tags_of());
        if outcome == Outcome::Unknown {
            refresh_tags(ctx).await;
            (outcome, why) = placement_honoured(view, &ctx.view.tags_of());
        }
        match outcome {
            Outcome::Held => {
                self.violated_since = None;
                if view.config.placement.is_set() {
                    sdk::check!(Property::PlacementHonoured, true, &json!({ "placement": view.config.placement }));
                }
            }
            Outcome::Unknown => tracing::debug!("placement not judged: {why}"),
            Outcome::Failed => {
                let since = *self.violated_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= PLACEMENT_GRACE {
                    sdk::check!(Property::PlacementHonoured, false, &json!({ "stream": ctx.stream, "placement": view.config.placement,
                        "peers": peers(view), "problem": why, "settled_for_s": since.elapsed().as_secs_f64() }));
                    self.violated_since = None; // the next report needs another whole grace
                }
            }
        }
    }
}

/// Waits until the stream has settled at its configured replica count with `extra` true
/// and every node healthy; judged by `property`. (Where it settled is the monitor's to
/// judge: [`PlacementJudge`].) `before`: the
/// peers (leader first) before the operation, to tell whether it had an effect.
pub async fn wait_settled(
    ctx: &Ctx,
    client: &async_nats::Client,
    op: OpKind,
    property: Property,
    before: &[String],
    extra: impl Fn(&StreamInfoView) -> Result<(), String>,
) -> bool {
    let Some(after) = until_settled(ctx, client, op.id(), property, extra).await else { return false };
    let effect = match op {
        OpKind::MetaStepdown => {
            let now = crate::nats::replicas::ReplicaProbe::new(&ctx.cluster.monitor_urls).meta_leader().await;
            now.is_some() && now.as_ref() != before.first()
        }
        _ => took_effect(op, before, &after),
    };
    count_settled(ctx, op, before, &after, effect);
    true
}

/// Waits, in windows where the new peers' catch-up counts as progress (`what` names the
/// wait, `property` judges it), until the stream has settled at its configured replica
/// count with `extra` true and every node healthy. Its peers then (leader first), or `None`
/// when stopped.
pub async fn until_settled(
    ctx: &Ctx,
    client: &async_nats::Client,
    what: &'static str,
    property: Property,
    extra: impl Fn(&StreamInfoView) -> Result<(), String>,
) -> Option<Vec<String>> {
    let settling = Settling::new(ctx);
    let check = || async {
        let info = info(ctx, client).await.map_err(Failure::stalled)?;
        settling.judge(&info.view, settled(&info.view, info.view.config.num_replicas).and_then(|()| extra(&info.view))).await?;
        Ok(peers(&info.view))
    };
    ctx.live.retry_progressing(what, property, &ctx.cancel, check).await
}

/// Whether a group's peers (leader first) changed as `op` should change them: another
/// leader after a stepdown, another set of peers otherwise.
pub fn took_effect(op: OpKind, before: &[String], after: &[String]) -> bool {
    match op {
        OpKind::StreamStepdown | OpKind::ConsumerStepdown => after.first() != before.first(),
        _ => after.iter().collect::<std::collections::BTreeSet<_>>() != before.iter().collect(),
    }
}

/// Counts a settled operation, and whether it took effect.
pub fn count_settled(ctx: &Ctx, op: OpKind, before: &[String], after: &[String], effect: bool) {
    ctx.ops.record(&ctx.stream, op, "settled", json!({ "before": before, "after": after, "effect": effect }));
    ctx.ops.count(op, |c| {
        c.settled += 1;
        c.effect_seen += u64::from(effect);
    });
}

/// A change being waited for: settled and healthy yet, and if not, whether its new peers
/// are catching up ([`CatchUp`]).
pub struct Settling<'a> {
    ctx: &'a Ctx,
    http: reqwest::Client,
    /// The probe, the catch-up count, and the faults started at the last look.
    look: tokio::sync::Mutex<(ReplicaProbe, CatchUp, usize)>,
}

impl<'a> Settling<'a> {
    pub fn new(ctx: &'a Ctx) -> Self {
        let look = tokio::sync::Mutex::new((ReplicaProbe::new(&ctx.cluster.monitor_urls), CatchUp::default(), fault_starts(ctx)));
        Settling { ctx, http: http_client(), look }
    }

    /// `Ok` when the stream says it has settled (`stream`) and every node's `/healthz` is
    /// green. Otherwise why not, as a failure that progressed when the gap between the
    /// stream's furthest and slowest peer reached a new low since the last look.
    pub async fn judge(&self, view: &StreamInfoView, stream: Result<(), String>) -> Result<(), Failure> {
        let why = match stream {
            Ok(()) => match all_healthy(&self.http, &self.ctx.cluster.monitor_urls).await {
                Ok(()) => return Ok(()),
                Err(why) => why,
            },
            Err(why) => why,
        };
        let mut look = self.look.lock().await;
        let (probe, catch_up, faults_seen) = &mut *look;
        let faults = fault_starts(self.ctx);
        let acked = || Stats::get(&self.ctx.stats.last_acked_seq);
        let acked_before = acked();
        let progressed = match probe.catch_up_look(&self.ctx.stream, view).await {
            Some(peers) => {
                // Counted between looks that saw every peer: a fault during a failed look counts.
                let struck = std::mem::replace(faults_seen, faults) != faults;
                catch_up.observe(&peers, struck, acked().saturating_sub(acked_before))
            }
            None => false,
        };
        if progressed {
            tracing::debug!(why, "still settling, but the new peers are catching up");
        }
        Err(Failure { error: why, progressed })
    }
}

/// Faults the local injector has started so far (0 without one: Antithesis's own faults are
/// not seen, so no setback is excused there).
fn fault_starts(ctx: &Ctx) -> usize {
    ctx.faults.as_ref().map_or(0, |f| f.starts())
}

/// Whether the stream had settled before this operation (an operation stacked on one
/// still settling is the interesting case), and whether the durable consumer was behind.
pub fn note_settling(ctx: &Ctx, info: &StreamInfoView, op: OpKind) {
    let unsettled = settled(info, info.config.num_replicas).err();
    sdk::check!(Property::OperationWhileAnotherSettling, unsettled.is_some(), &json!({ "op": op.id(), "unsettled": unsettled }));
    if ctx.cfg.durable.enabled {
        let lag = Stats::get(&ctx.stats.last_acked_seq).saturating_sub(Stats::get(&ctx.stats.durable_received));
        sdk::check!(Property::DurableOperatedWhileBehind, lag > 0, &json!({ "op": op.id(), "lag": lag }));
    }
}
