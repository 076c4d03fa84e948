//! Operations on the durable consumer itself: its leader steps down, its replica count
//! changes (1 up to the stream's, or 0 to follow the stream), one of its peers is removed or
//! evacuated (2.15), while the stream goes on being scaled and moved. Seed 001's hard case
//! is an R1 consumer under a replicated stream whose leader is elsewhere: a scale down must
//! move the consumer first.

use super::{count_settled, note_settling, send, took_effect};
use crate::drivers::durable::{consumer_info as info, NAME};
use crate::nats::jsapi;
use crate::random::Chooser;
use crate::context::retry::Failure;
use crate::sdk;
use crate::context::state::Ctx;
use properties::operations::{peer_gone, peers, OpKind};
use properties::scale::{consumer_settled, StreamInfoView};
use properties::Property;
use serde_json::{json, Value};

/// The stream's info and the durable consumer's (view and raw reply); when either does not
/// answer, `op` is counted not applicable.
async fn both(ctx: &Ctx, client: &async_nats::Client, op: OpKind) -> Option<(jsapi::StreamInfo, StreamInfoView, Value)> {
    match (jsapi::stream_info(client, &ctx.stream, ctx.api_timeout()).await, info(ctx, client).await) {
        (Ok(stream), Ok((consumer, raw))) => Some((stream, consumer, raw)),
        _ => {
            ctx.ops.count(op, |c| c.not_applicable += 1);
            None
        }
    }
}

/// Makes the durable consumer's leader step down. `None` when stopped.
pub async fn stepdown(ctx: &Ctx, client: &async_nats::Client, wait: bool) -> Option<()> {
    let op = OpKind::ConsumerStepdown;
    let Some((stream, consumer, _)) = both(ctx, client, op).await else { return Some(()) };
    let before = peers(&consumer);
    if before.len() < 2 {
        // A single replica has nobody to hand over to.
        ctx.ops.count(op, |c| c.not_applicable += 1);
        return Some(());
    }
    note_settling(ctx, &stream.view, op);
    let api = format!("CONSUMER.LEADER.STEPDOWN.{}.{NAME}", ctx.stream);
    let request = || jsapi::request(client, &api, &Value::Null, ctx.api_timeout());
    if !send(ctx, op, Property::StepdownEventuallyElects, json!({ "peers": before }), request).await? {
        return Some(());
    }
    sdk::hold!(Property::ConsumerLeaderSteppedDown);
    if wait {
        wait_settled(ctx, client, op, Property::StepdownEventuallyElects, &before, None).await;
    }
    Some(())
}

/// Removes or evacuates (`op`) one of the durable consumer's peers; the replacement is
/// another of the stream's peers. `None` when stopped.
pub async fn peer_step(ctx: &Ctx, client: &async_nats::Client, rng: &mut Chooser, op: OpKind, wait: bool) -> Option<()> {
    let Some((stream, consumer, _)) = both(ctx, client, op).await else { return Some(()) };
    let holders = peers(&consumer);
    // A consumer lives on its stream's peers: without one it does not hold, the server
    // rightly refuses ("peer remap failed").
    let spare = peers(&stream.view).iter().any(|p| !holders.contains(p));
    // Removing an R1 consumer's only replica is accepted (2.15.1) though no other server
    // holds its state: the operator would put its acks at risk itself. Evacuation adds the
    // replacement first.
    let sole_copy = op == OpKind::ConsumerPeerRemove && holders.len() < 2;
    if holders.is_empty() || !spare || sole_copy {
        ctx.ops.count(op, |c| c.not_applicable += 1);
        return Some(());
    }
    let peer = rng.pick("consumer peer to remove", &holders.iter().map(String::as_str).collect::<Vec<_>>()).to_string();
    // Like a stream's PEER.REMOVE, a consumer's drops its peer before the replacement holds
    // its state: no fault may wipe another of its servers meanwhile. No look at the stream
    // shows it carried out, so its turn lasts a liveness window (see ClusterView::dropping).
    let drops = op == OpKind::ConsumerPeerRemove;
    if drops && !ctx.view.dropping(None, 0, ctx.cfg.liveness.recent()) {
        ctx.ops.count(op, |c| c.not_applicable += 1);
        return Some(());
    }
    note_settling(ctx, &stream.view, op);
    let api = match op {
        OpKind::ConsumerPeerEvacuate => format!("CONSUMER.PEER.EVACUATE.{}.{NAME}", ctx.stream),
        _ => format!("CONSUMER.PEER.REMOVE.{}.{NAME}", ctx.stream),
    };
    let body = json!({ "peer": peer });
    let request = || jsapi::request(client, &api, &body, ctx.api_timeout());
    if !send(ctx, op, Property::PeerRemovalEventuallyReplaced, json!({ "peer": peer, "peers": holders }), request).await? {
        if drops {
            ctx.view.not_dropped(None, 0);
        }
        return Some(());
    }
    if wait {
        wait_settled(ctx, client, op, Property::PeerRemovalEventuallyReplaced, &holders, Some(&peer)).await;
    }
    Some(())
}

/// Changes the durable consumer's replica count. `None` when stopped.
pub async fn scale(ctx: &Ctx, client: &async_nats::Client, rng: &mut Chooser, wait: bool) -> Option<()> {
    let op = OpKind::ConsumerScale;
    let Some((stream, consumer, raw)) = both(ctx, client, op).await else { return Some(()) };
    let now = consumer.config.num_replicas;
    let choices: Vec<usize> = (0..=stream.view.config.num_replicas.max(1)).filter(|r| *r != now).collect();
    let target = rng.pick("durable consumer replicas", &choices);
    note_settling(ctx, &stream.view, op);
    let mut config = raw["config"].clone();
    config["num_replicas"] = json!(target);
    let api = format!("CONSUMER.CREATE.{}.{NAME}", ctx.stream);
    let body = json!({ "stream_name": ctx.stream, "config": config, "action": "update" });
    let request = || jsapi::request(client, &api, &body, ctx.api_timeout());
    if !send(ctx, op, Property::ConsumerScaleEventuallySettles, json!({ "from": now, "to": target, "peers": peers(&consumer) }), request).await? {
        return Some(());
    }
    if wait {
        wait_settled(ctx, client, op, Property::ConsumerScaleEventuallySettles, &peers(&consumer), None).await;
    }
    Some(())
}

/// Evaluated on every scale down of the stream: whether the durable consumer then had a
/// single replica on another server than the stream's leader (it must move before the
/// stream can shrink).
pub async fn note_stream_scale_down(ctx: &Ctx, client: &async_nats::Client, stream: &StreamInfoView) {
    if !ctx.cfg.durable.enabled {
        return;
    }
    let Ok((consumer, _)) = info(ctx, client).await else { return };
    let stream_leader = peers(stream).into_iter().next();
    let consumer_peers = peers(&consumer);
    let elsewhere = consumer_peers.len() == 1 && stream_leader.is_some() && consumer_peers.first() != stream_leader.as_ref();
    sdk::check!(Property::StreamScaledDownPastAnR1Consumer, elsewhere, &json!({ "stream_leader": stream_leader, "consumer_peers": consumer_peers }));
}

/// Waits until the stream and the consumer have both settled (and the consumer left
/// `removed`); counts whether the consumer's leader (stepdown) or peers changed.
async fn wait_settled(ctx: &Ctx, client: &async_nats::Client, op: OpKind, property: Property, before: &[String], removed: Option<&str>) -> bool {
    let settling = super::Settling::new(ctx);
    let check = || async {
        let stream = jsapi::stream_info(client, &ctx.stream, ctx.api_timeout()).await.map_err(Failure::stalled)?;
        let stream_settled = properties::scale::settled(&stream.view, stream.view.config.num_replicas);
        settling.judge(&stream.view, stream_settled).await?;
        let (consumer, _) = info(ctx, client).await.map_err(Failure::stalled)?;
        consumer_settled(&consumer, stream.view.config.num_replicas)
            .and_then(|()| removed.map_or(Ok(()), |r| peer_gone(&consumer, r)))
            .map_err(|why| Failure::stalled(format!("consumer: {why}")))?;
        Ok(peers(&consumer))
    };
    let Some(after) = ctx.live.retry_progressing(op.id(), property, &ctx.cancel, check).await else { return false };
    count_settled(ctx, op, before, &after, took_effect(op, before, &after));
    true
}
