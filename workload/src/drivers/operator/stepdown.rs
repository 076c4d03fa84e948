//! Leader stepdowns: the stream's Raft group, and the meta group (system account).

use super::{note_settling, send, wait_settled};
use crate::nats::jsapi;
use crate::nats::replicas::ReplicaProbe;
use crate::sdk;
use crate::context::state::Ctx;
use properties::operations::{peers, OpKind};
use properties::Property;
use serde_json::{json, Value};

/// Makes the stream's leader step down. `None` when stopped.
pub async fn stream(ctx: &Ctx, client: &async_nats::Client, wait: bool) -> Option<()> {
    let timeout = ctx.api_timeout();
    let before = match jsapi::stream_info(client, &ctx.stream, timeout).await {
        Ok(info) if info.view.config.num_replicas > 1 => {
            note_settling(ctx, &info.view, OpKind::StreamStepdown);
            peers(&info.view)
        }
        // An R1 stream has nobody to hand over to.
        _ => {
            ctx.ops.count(OpKind::StreamStepdown, |c| c.not_applicable += 1);
            return Some(());
        }
    };
    let api = format!("STREAM.LEADER.STEPDOWN.{}", ctx.stream);
    let request = || jsapi::request(client, &api, &Value::Null, timeout);
    let accepted = send(ctx, OpKind::StreamStepdown, Property::StepdownEventuallyElects, json!({ "peers": before }), request).await?;
    finish(ctx, client, OpKind::StreamStepdown, Property::StreamLeaderSteppedDown, accepted, &before, wait).await
}

/// Makes the meta leader step down, through the system account connection `system`.
pub async fn meta(ctx: &Ctx, system: &async_nats::Client, client: &async_nats::Client, wait: bool) -> Option<()> {
    let timeout = ctx.api_timeout();
    let before: Vec<String> = ReplicaProbe::new(&ctx.cluster.monitor_urls).meta_leader().await.into_iter().collect();
    let request = || jsapi::request(system, "META.LEADER.STEPDOWN", &Value::Null, timeout);
    let accepted = send(ctx, OpKind::MetaStepdown, Property::StepdownEventuallyElects, json!({ "leader": before }), request).await?;
    finish(ctx, client, OpKind::MetaStepdown, Property::MetaLeaderSteppedDown, accepted, &before, wait).await
}

async fn finish(ctx: &Ctx, client: &async_nats::Client, op: OpKind, reached: Property, accepted: bool, before: &[String], wait: bool) -> Option<()> {
    if !accepted {
        return Some(());
    }
    sdk::check!(reached => [Property::MetaLeaderSteppedDown, Property::StreamLeaderSteppedDown], true, &Value::Null);
    if wait {
        // Settled needs a stream leader, and healthy nodes a meta leader.
        wait_settled(ctx, client, op, Property::StepdownEventuallyElects, before, |_| Ok(())).await;
    }
    Some(())
}
