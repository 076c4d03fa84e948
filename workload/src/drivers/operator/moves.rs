//! Moving the stream: its `placement` changed to another group of servers in its cluster
//! (`tags`), to another cluster of a supercluster (`cluster`), or dropped; sometimes
//! cancelled at once (2.15), sometimes waited for.

use super::{note_settling, send, wait_settled};
use crate::nats::monitor::{http_client, unhealthy};
use crate::nats::jsapi;
use crate::random::Chooser;
use crate::sdk;
use crate::context::state::Ctx;
use properties::operations::{peers, servers_with, OpKind, CLUSTER_TAG};
use properties::scale::PlacementView;
use properties::Property;
use rand::Rng;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Where a stream of `replicas` placed at `current`, whose leader is `leader`, may go:
/// another group tag of its cluster, no tags, or (in a supercluster) another cluster; only
/// places with servers enough for `replicas`.
pub fn destinations(tags_of: &BTreeMap<String, BTreeSet<String>>, current: &PlacementView, leader: Option<&str>, replicas: usize) -> Vec<PlacementView> {
    let is_cluster = |t: &&String| t.starts_with(CLUSTER_TAG);
    let clusters: BTreeSet<String> = tags_of.values().flatten().filter(is_cluster).map(|t| t[CLUSTER_TAG.len()..].to_string()).collect();
    let here = current.cluster.clone().or_else(|| {
        let tags = tags_of.get(leader?)?;
        tags.iter().find(is_cluster).map(|t| t[CLUSTER_TAG.len()..].to_string())
    });
    let groups: BTreeSet<&String> = tags_of.values().flatten().filter(|t| !is_cluster(t)).collect();
    let pinned = clusters.len() > 1; // name the cluster, so a tag does not pick the other one's group
    let mut out: Vec<PlacementView> = groups.into_iter().map(|g| PlacementView { cluster: here.clone().filter(|_| pinned), tags: vec![g.clone()] }).collect();
    out.push(PlacementView { cluster: here.clone().filter(|_| pinned), tags: Vec::new() });
    out.extend(clusters.iter().filter(|c| Some(*c) != here.as_ref()).map(|c| PlacementView { cluster: Some(c.clone()), tags: Vec::new() }));
    out.retain(|p| p != current && servers_with(tags_of, &p.required()).len() >= replicas);
    out
}

/// One move (and maybe its cancel). `None` when stopped.
pub async fn step(ctx: &Ctx, client: &async_nats::Client, rng: &mut Chooser, cancel_moves: bool, wait: bool) -> Option<()> {
    let timeout = ctx.api_timeout();
    let Ok(info) = jsapi::stream_info(client, &ctx.stream, timeout).await else {
        ctx.ops.count(OpKind::Move, |c| c.not_applicable += 1);
        return Some(());
    };
    let current = info.view.config.placement.clone();
    let leader = info.view.cluster.as_ref().and_then(|c| c.leader.clone());
    let options = destinations(&ctx.view.tags_of(), &current, leader.as_deref(), info.view.config.num_replicas);
    if options.is_empty() {
        ctx.ops.count(OpKind::Move, |c| c.not_applicable += 1);
        return Some(());
    }
    let to = options[rng.gen_range(0..options.len())].clone();
    note_settling(ctx, &info.view, OpKind::Move);
    let sick = unhealthy(&http_client(), &ctx.cluster.monitor_urls).await;
    let request = || {
        let mut config = info.raw["config"].clone();
        set_placement(&mut config, &to);
        async move { jsapi::request(client, &format!("STREAM.UPDATE.{}", ctx.stream), &config, timeout).await }
    };
    if !send(ctx, OpKind::Move, Property::MoveEventuallySettles, json!({ "from": current, "to": to, "peers": peers(&info.view) }), request).await? {
        return Some(());
    }
    ctx.view.peers_changing(); // a strike aligned with the move
    sdk::check!(Property::MovedWhileANodeWasDown, !sick.is_empty(), &json!({ "to": to, "unhealthy": sick }));
    if cancel_moves && rng.chance("cancel the move", ctx.cfg.operator.cancel_move_probability) {
        let (api, body) = (format!("STREAM.CANCEL_MOVE.{}", ctx.stream), json!({}));
        let cancel = || jsapi::request(client, &api, &body, timeout);
        // Refused when the move has finished already.
        if send(ctx, OpKind::CancelMove, Property::MoveEventuallySettles, json!({ "to": to }), cancel).await? {
            sdk::hold!(Property::MoveCancelled);
        }
    }
    if wait {
        wait_settled(ctx, client, OpKind::Move, Property::MoveEventuallySettles, &peers(&info.view), |_| Ok(())).await;
    }
    Some(())
}

fn set_placement(config: &mut Value, to: &PlacementView) {
    if let Some(c) = config.as_object_mut() {
        match to.is_set() {
            false => c.remove("placement"),
            true => c.insert("placement".into(), json!(to)),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(entries: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        entries.iter().map(|(n, t)| (n.to_string(), t.iter().map(|s| s.to_string()).collect())).collect()
    }

    fn at(cluster: Option<&str>, t: &[&str]) -> PlacementView {
        PlacementView { cluster: cluster.map(String::from), tags: t.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn destinations_fit_the_replicas_and_differ_from_where_the_stream_is() {
        let one = tags(&[("n1", &["g0", "g2", "cluster:workload"]), ("n2", &["g0", "g1", "cluster:workload"]), ("n3", &["g1", "g2", "cluster:workload"])]);
        let d = destinations(&one, &at(None, &[]), Some("n1"), 2);
        assert_eq!(d, vec![at(None, &["g0"]), at(None, &["g1"]), at(None, &["g2"])], "one cluster: no cluster named");
        assert!(destinations(&one, &at(None, &[]), Some("n1"), 3).is_empty(), "no group holds three replicas");
        let d = destinations(&one, &at(None, &["g1"]), Some("n2"), 1);
        assert!(!d.contains(&at(None, &["g1"])) && d.contains(&at(None, &[])), "elsewhere, or no placement");
    }

    #[test]
    fn a_supercluster_adds_the_other_cluster_and_pins_groups_to_this_one() {
        let two = tags(&[
            ("n1", &["g0", "cluster:c1"]),
            ("n2", &["g0", "cluster:c1"]),
            ("n3", &["cluster:c1"]),
            ("n4", &["g0", "cluster:c2"]),
            ("n5", &["g0", "cluster:c2"]),
            ("n6", &["cluster:c2"]),
        ]);
        let d = destinations(&two, &at(None, &[]), Some("n3"), 3);
        assert_eq!(d, vec![at(Some("c1"), &[]), at(Some("c2"), &[])], "{d:?}");
        let d = destinations(&two, &at(Some("c2"), &[]), Some("n4"), 2);
        assert_eq!(d, vec![at(Some("c2"), &["g0"]), at(Some("c1"), &[])], "{d:?}");
    }
}
