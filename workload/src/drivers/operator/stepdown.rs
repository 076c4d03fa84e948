//! Leader stepdowns: the stream's Raft group, and the meta group (system account).

use super::{note_settling, send, wait_settled, Sent};
use crate::jsapi;
use crate::sdk;
use crate::state::Ctx;
use properties::operations::OpKind;
use properties::Property;
use serde_json::Value;

/// Makes the stream's leader step down. `None` when stopped.
pub async fn stream(ctx: &Ctx, client: &async_nats::Client, wait: bool) -> Option<()> {
    let timeout = ctx.api_timeout();
    match jsapi::stream_info(client, &ctx.stream, timeout).await {
        Ok(info) if info.view.config.num_replicas > 1 => note_settling(&info.view, OpKind::StreamStepdown),
        // An R1 stream has nobody to hand over to.
        _ => {
            ctx.ops.count(OpKind::StreamStepdown, |c| c.not_applicable += 1);
            return Some(());
        }
    }
    let api = format!("STREAM.LEADER.STEPDOWN.{}", ctx.stream);
    let request = || jsapi::request(client, &api, &Value::Null, timeout);
    finish(ctx, client, OpKind::StreamStepdown, Property::StreamLeaderSteppedDown, send(ctx, "stream stepdown", Property::StepdownEventuallyElects, request).await?, wait).await
}

/// Makes the meta leader step down, through the system account connection `system`.
pub async fn meta(ctx: &Ctx, system: &async_nats::Client, client: &async_nats::Client, wait: bool) -> Option<()> {
    let timeout = ctx.api_timeout();
    let request = || jsapi::request(system, "META.LEADER.STEPDOWN", &Value::Null, timeout);
    finish(ctx, client, OpKind::MetaStepdown, Property::MetaLeaderSteppedDown, send(ctx, "meta stepdown", Property::StepdownEventuallyElects, request).await?, wait).await
}

async fn finish(ctx: &Ctx, client: &async_nats::Client, op: OpKind, reached: Property, sent: Sent<Value>, wait: bool) -> Option<()> {
    match sent {
        Sent::Refused(why) => {
            tracing::debug!(op = op.id(), "refused: {why}");
            ctx.ops.count(op, |c| c.refused += 1);
            return Some(());
        }
        Sent::Done(_) => {
            ctx.ops.count(op, |c| c.done += 1);
            sdk::hold(reached);
        }
    }
    if wait {
        // Settled needs a stream leader, and STREAM.INFO through the API a meta leader.
        wait_settled(ctx, client, op, Property::StepdownEventuallyElects, |_| Ok(())).await;
    }
    Some(())
}
