//! Moving the stream inside the cluster: its `placement.tags` changed to another group of
//! servers (or dropped), sometimes cancelled at once (2.15), sometimes waited for.

use super::{note_settling, send, wait_settled, Sent};
use crate::cluster::{http_client, unhealthy};
use crate::jsapi;
use crate::random::Chooser;
use crate::sdk;
use crate::state::Ctx;
use properties::operations::{peers, servers_with, OpKind};
use properties::Property;
use rand::Rng;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Where the stream may go from `current` tags at `replicas`: every single tag some server
/// carries whose servers can hold that many replicas, other than the current placement,
/// and no placement at all when one is set.
pub fn destinations(tags_of: &std::collections::BTreeMap<String, BTreeSet<String>>, current: &[String], replicas: usize) -> Vec<Vec<String>> {
    let all: BTreeSet<&String> = tags_of.values().flatten().collect();
    let mut out: Vec<Vec<String>> =
        all.into_iter().map(|t| vec![t.clone()]).filter(|t| t.as_slice() != current && servers_with(tags_of, t).len() >= replicas).collect();
    if !current.is_empty() {
        out.push(Vec::new());
    }
    out
}

/// One move (and maybe its cancel). `None` when stopped.
pub async fn step(ctx: &Ctx, client: &async_nats::Client, rng: &mut Chooser, cancel_moves: bool, wait: bool) -> Option<()> {
    let timeout = ctx.api_timeout();
    let Ok(info) = jsapi::stream_info(client, &ctx.stream, timeout).await else {
        ctx.ops.count(OpKind::Move, |c| c.not_applicable += 1);
        return Some(());
    };
    let current = info.view.config.placement.tags.clone();
    let options = destinations(&ctx.view.tags_of(), &current, info.view.config.num_replicas);
    if options.is_empty() {
        ctx.ops.count(OpKind::Move, |c| c.not_applicable += 1);
        return Some(());
    }
    let to = options[rng.gen_range(0..options.len())].clone();
    note_settling(&info.view, OpKind::Move);
    let sick = unhealthy(&http_client(), &ctx.cluster.monitor_urls).await;
    let request = || {
        let mut config = info.raw["config"].clone();
        set_placement(&mut config, &to);
        async move { jsapi::request(client, &format!("STREAM.UPDATE.{}", ctx.stream), &config, timeout).await }
    };
    match send(ctx, "move request", Property::MoveEventuallySettles, request).await? {
        Sent::Refused(why) => {
            tracing::debug!(?to, "move refused: {why}");
            ctx.ops.count(OpKind::Move, |c| c.refused += 1);
            return Some(());
        }
        Sent::Done(_) => {
            tracing::debug!(from = ?current, ?to, "move requested");
            ctx.ops.count(OpKind::Move, |c| c.done += 1);
            ctx.view.peers_changing(); // a strike aligned with the move
        }
    }
    sdk::check(Property::MovedWhileANodeWasDown, !sick.is_empty(), &json!({ "to": to, "unhealthy": sick }));
    if cancel_moves && rng.chance("cancel the move", ctx.cfg.operator.cancel_move_probability) {
        let (api, body) = (format!("STREAM.CANCEL_MOVE.{}", ctx.stream), json!({}));
        let cancel = || jsapi::request(client, &api, &body, timeout);
        match send(ctx, "cancel move", Property::MoveEventuallySettles, cancel).await? {
            Sent::Done(_) => {
                ctx.ops.count(OpKind::CancelMove, |c| c.done += 1);
                sdk::hold(Property::MoveCancelled);
            }
            Sent::Refused(why) => {
                tracing::debug!("cancel refused: {why}"); // the move may have finished already
                ctx.ops.count(OpKind::CancelMove, |c| c.refused += 1);
            }
        }
    }
    if wait {
        wait_settled(ctx, client, OpKind::Move, Property::MoveEventuallySettles, &peers(&info.view), |_| Ok(())).await;
    }
    Some(())
}

fn set_placement(config: &mut Value, tags: &[String]) {
    match config.as_object_mut() {
        Some(c) if tags.is_empty() => {
            c.remove("placement");
        }
        Some(c) => {
            c.insert("placement".into(), json!({ "tags": tags }));
        }
        None => {}
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn destinations_fit_the_replicas_and_differ_from_where_the_stream_is() {
        let tags_of: BTreeMap<String, BTreeSet<String>> = [("n1", ["g0", "g2"]), ("n2", ["g0", "g1"]), ("n3", ["g1", "g2"])]
            .iter()
            .map(|(n, t)| (n.to_string(), t.iter().map(|s| s.to_string()).collect()))
            .collect();
        let d = destinations(&tags_of, &[], 2);
        assert_eq!(d, vec![vec!["g0".to_string()], vec!["g1".into()], vec!["g2".into()]]);
        assert!(destinations(&tags_of, &[], 3).is_empty(), "no group holds three replicas");
        let d = destinations(&tags_of, &["g1".into()], 1);
        assert!(!d.contains(&vec!["g1".to_string()]) && d.contains(&Vec::new()), "elsewhere, or no placement");
    }
}
