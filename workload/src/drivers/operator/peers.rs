//! Peer removal and evacuation: one of the stream's servers dropped, the server picking a
//! replacement that its placement allows (`PEER.REMOVE` drops first, `PEER.EVACUATE`, new
//! in 2.15, adds the replacement first; `SERVER.EVACUATE`, 2.15, system account, moves
//! everything off that server).

use super::{note_settling, send, wait_settled};
use crate::nats::monitor::{http_client, unhealthy};
use crate::nats::jsapi;
use crate::random::Chooser;
use crate::sdk;
use crate::context::state::Ctx;
use properties::operations::{evacuation_leaves_room, has_spare, peers, removal_done, servers_with, OpKind};
use properties::scale::settled;
use properties::Property;
use serde_json::json;

/// One removal or evacuation (`op`); a server evacuation goes through `system`. `None`
/// when stopped.
pub async fn step(ctx: &Ctx, client: &async_nats::Client, system: &async_nats::Client, rng: &mut Chooser, op: OpKind, wait: bool) -> Option<()> {
    let timeout = ctx.api_timeout();
    let Ok(info) = jsapi::stream_info(client, &ctx.stream, timeout).await else {
        ctx.ops.count(op, |c| c.not_applicable += 1);
        return Some(());
    };
    let holders = peers(&info.view);
    let removed_before = removed_servers(ctx).len();
    // Only servers that answered just now count: a spare must exist under the name seen.
    let tags_of = ctx.view.answering_tags_of();
    // A replacement must exist, or the server rightly refuses ("peer remap failed"), and
    // beyond any peer the stream already lacks.
    let spare = has_spare(&servers_with(&tags_of, &info.view.config.placement.required()), &holders, info.view.config.num_replicas);
    // Removing the only replica of an R1 stream is accepted and starts the stream afresh,
    // empty, on another server: the operator would have destroyed the data itself.
    // Evacuation adds the replacement first, so it may take an R1 stream's replica.
    let sole_copy = op == OpKind::PeerRemove && info.view.config.num_replicas < 2;
    if holders.is_empty() || !spare || sole_copy {
        ctx.ops.count(op, |c| c.not_applicable += 1);
        return Some(());
    }
    let peer = rng.pick("peer to remove", &holders.iter().map(String::as_str).collect::<Vec<_>>()).to_string();
    // PEER.REMOVE drops the peer before the replacement holds anything: another whole copy
    // must stay behind (each node read, where the monitor can; else the leader's word), and
    // no fault may be destroying one meanwhile.
    let replicas = info.view.config.num_replicas;
    let drops = op == OpKind::PeerRemove;
    if drops {
        let whole = if ctx.cluster.monitor_urls.is_empty() { settled(&info.view, replicas).is_ok() } else { ctx.view.complete_copies() >= 2 };
        if !whole || !super::drop_allowed(ctx, Some(&peer), replicas) {
            ctx.ops.count(op, |c| c.not_applicable += 1);
            return Some(());
        }
    }
    // A server evacuation moves every stream on that server, not only this run's.
    if op == OpKind::ServerEvacuate {
        let room = jsapi::all_streams(client, timeout).await.map_err(|e| e.to_string()).and_then(|all| evacuation_leaves_room(&all, &peer, &tags_of));
        if let Err(why) = room {
            tracing::debug!("no server evacuation of {peer}: {why}");
            ctx.ops.count(op, |c| c.not_applicable += 1);
            return Some(());
        }
    }
    note_settling(ctx, &info.view, op);
    let sick = unhealthy(&http_client(), &ctx.cluster.monitor_urls).await;
    let (api, via) = match op {
        OpKind::PeerEvacuate => (format!("STREAM.PEER.EVACUATE.{}", ctx.stream), client),
        OpKind::ServerEvacuate => ("SERVER.EVACUATE".to_string(), system),
        _ => (format!("STREAM.PEER.REMOVE.{}", ctx.stream), client),
    };
    let body = json!({ "peer": peer });
    let request = || jsapi::request(via, &api, &body, timeout);
    if !send(ctx, op, Property::PeerRemovalEventuallyReplaced, json!({ "peer": peer, "peers": holders, "leader": info.view.cluster.as_ref().and_then(|c| c.leader.clone()) }), request).await? {
        if drops {
            ctx.view.not_dropped(Some(&peer), replicas);
        }
        return Some(());
    }
    ctx.view.peers_changing(); // a strike aligned with the change of peers
    sdk::check!(Property::PeerRemovedWhileANodeWasDown, !sick.is_empty(), &json!({ "op": op.id(), "peer": peer, "unhealthy": sick }));
    if wait {
        // A membership fault that takes another of the stream's servers out meanwhile may
        // undo this removal (docs/operations.md, "An evacuation undone by a later removal"): counted.
        let superseded = std::sync::Mutex::new(None);
        let gone = |v: &properties::scale::StreamInfoView| {
            let since: Vec<String> = removed_servers(ctx).into_iter().skip(removed_before).collect();
            let other = removal_done(v, &peer, &holders, &since)?;
            *superseded.lock().unwrap_or_else(|e| e.into_inner()) = other;
            Ok(())
        };
        let settled = wait_settled(ctx, client, op, Property::PeerRemovalEventuallyReplaced, &holders, gone).await;
        if let (true, Some(other)) = (settled, superseded.into_inner().unwrap_or_else(|e| e.into_inner())) {
            ctx.ops.record(&ctx.stream, op, "superseded", json!({ "peer": peer, "by_removal_of": other }));
            ctx.ops.count(op, |c| c.superseded += 1);
        }
    }
    Some(())
}

/// The servers the local injector's membership faults removed so far (none without it).
fn removed_servers(ctx: &Ctx) -> Vec<String> {
    ctx.faults.as_ref().map_or_else(Vec::new, |f| f.servers_removed())
}
