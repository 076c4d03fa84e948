//! The operations an operator performs on a live stream, as data, and the pure judgments
//! of their effect: which server releases have them, where the stream's peers may be, and
//! whether a removed peer is really gone.

use crate::scale::StreamInfoView;
use crate::Outcome;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One kind of operation the operator draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// Change the replica count (the whole config sent back).
    Scale,
    /// Change `placement.tags`: the stream moves to the servers that carry them.
    Move,
    /// `$JS.API.STREAM.CANCEL_MOVE.<stream>` right after a move (2.15).
    CancelMove,
    /// `$JS.API.STREAM.PEER.REMOVE.<stream>`: drop one peer, the server picks another.
    PeerRemove,
    /// `$JS.API.STREAM.PEER.EVACUATE.<stream>` (2.15): add a replacement, then drop the peer.
    PeerEvacuate,
    /// `$JS.API.STREAM.LEADER.STEPDOWN.<stream>`.
    StreamStepdown,
    /// `$JS.API.META.LEADER.STEPDOWN` (system account).
    MetaStepdown,
    /// `$JS.API.CONSUMER.LEADER.STEPDOWN.<stream>.<durable>`.
    ConsumerStepdown,
    /// The durable consumer's `num_replicas` changed: 1 up to the stream's count, or 0
    /// (follow the stream).
    ConsumerScale,
    /// `$JS.API.CONSUMER.PEER.REMOVE.<stream>.<durable>` (2.15): one of the consumer's peers
    /// dropped, another of the stream's peers taking its place.
    ConsumerPeerRemove,
    /// `$JS.API.CONSUMER.PEER.EVACUATE.<stream>.<durable>` (2.15): the replacement added first.
    ConsumerPeerEvacuate,
    /// `$JS.API.SERVER.EVACUATE` (2.15, system account): every stream and consumer moved off
    /// one of the stream's servers.
    ServerEvacuate,
}

impl OpKind {
    pub const ALL: [OpKind; 12] = [
        OpKind::Scale,
        OpKind::Move,
        OpKind::CancelMove,
        OpKind::PeerRemove,
        OpKind::PeerEvacuate,
        OpKind::StreamStepdown,
        OpKind::MetaStepdown,
        OpKind::ConsumerStepdown,
        OpKind::ConsumerScale,
        OpKind::ConsumerPeerRemove,
        OpKind::ConsumerPeerEvacuate,
        OpKind::ServerEvacuate,
    ];

    pub fn id(self) -> &'static str {
        match self {
            OpKind::Scale => "scale",
            OpKind::Move => "move",
            OpKind::CancelMove => "cancel-move",
            OpKind::PeerRemove => "peer-remove",
            OpKind::PeerEvacuate => "peer-evacuate",
            OpKind::StreamStepdown => "stream-stepdown",
            OpKind::MetaStepdown => "meta-stepdown",
            OpKind::ConsumerStepdown => "consumer-stepdown",
            OpKind::ConsumerScale => "consumer-scale",
            OpKind::ConsumerPeerRemove => "consumer-peer-remove",
            OpKind::ConsumerPeerEvacuate => "consumer-peer-evacuate",
            OpKind::ServerEvacuate => "server-evacuate",
        }
    }

    /// Why a server of `version` (from its INFO) cannot be sent this operation, if it
    /// cannot. `system_account`: whether the workload holds system account credentials;
    /// `durable`: whether its durable consumer runs.
    pub fn unsupported(self, version: Option<Version>, system_account: bool, durable: bool) -> Option<String> {
        use OpKind::*;
        let new_in_2_15 = matches!(self, CancelMove | PeerEvacuate | ConsumerPeerRemove | ConsumerPeerEvacuate | ServerEvacuate);
        let on_the_consumer = matches!(self, ConsumerStepdown | ConsumerScale | ConsumerPeerRemove | ConsumerPeerEvacuate);
        match version {
            _ if matches!(self, MetaStepdown | ServerEvacuate) && !system_account => Some("needs system account credentials (operator.system_user)".into()),
            _ if on_the_consumer && !durable => Some("acts on the durable consumer, which is off ([durable] enabled)".into()),
            Some(v) if new_in_2_15 && v < Version(2, 15, 0) => Some(format!("new in 2.15; the server is {v}")),
            None if new_in_2_15 => Some("the server did not say its version; this operation is new in 2.15".into()),
            _ => None,
        }
    }
}

/// A server release, as INFO's `version` gives it ("2.15.1", "2.12.1-RC.2").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        let core = s.trim_start_matches('v').split(['-', '+']).next()?;
        let mut parts = core.split('.').map(|p| p.parse::<u32>().ok());
        Some(Version(parts.next()??, parts.next()??, parts.next().flatten().unwrap_or(0)))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// A server's cluster, as a tag: `cluster:<name>` (servers' own tags never contain ':'
/// here, and placement by cluster is judged like placement by tags).
pub const CLUSTER_TAG: &str = "cluster:";

/// Whether a requested operation's detail asks for what already is (a scale from 3 to 3):
/// it changes nothing, so no outage is its and no trigger is it.
pub fn changes_nothing(detail: &serde_json::Value) -> bool {
    detail["from"].is_u64() && detail["from"] == detail["to"]
}

/// The servers holding the stream: its leader and the listed replicas.
pub fn peers(info: &StreamInfoView) -> Vec<String> {
    let Some(c) = &info.cluster else { return Vec::new() };
    c.leader.iter().filter(|l| !l.is_empty()).cloned().chain(c.replicas.iter().map(|r| r.name.clone())).collect()
}

/// Whether a settled stream's peers all carry every tag of its placement and belong to its
/// cluster. `tags_of` maps the server names seen so far to their tags (and cluster tag); a
/// peer not in it cannot be judged.
pub fn placement_honoured(info: &StreamInfoView, tags_of: &BTreeMap<String, BTreeSet<String>>) -> (Outcome, String) {
    let required = &info.config.placement.required();
    if required.is_empty() {
        return (Outcome::Held, "no placement".into());
    }
    let mut unknown = Vec::new();
    for peer in peers(info) {
        match tags_of.get(&peer) {
            None => unknown.push(peer),
            Some(tags) => {
                if let Some(missing) = required.iter().find(|t| !tags.contains(*t)) {
                    return (Outcome::Failed, format!("peer {peer} lacks tag {missing} (has {tags:?})"));
                }
            }
        }
    }
    if unknown.is_empty() {
        (Outcome::Held, format!("every peer carries {required:?}"))
    } else {
        (Outcome::Unknown, format!("tags of {unknown:?} unknown"))
    }
}

/// The servers that carry every tag in `tags` (all known servers for none).
pub fn servers_with<'a>(tags_of: &'a BTreeMap<String, BTreeSet<String>>, tags: &[String]) -> Vec<&'a str> {
    tags_of.iter().filter(|(_, have)| tags.iter().all(|t| have.contains(t))).map(|(name, _)| name.as_str()).collect()
}

/// Whether removing one of `holders` (the stream's peers) leaves the server room to keep
/// `replicas` copies: among the servers its placement `allowed`, enough that are not
/// peers yet to replace the removed one and any peer the stream already lacks. A removed
/// server is not added back (2.14.2+), so on three servers an R3 stream short of a peer
/// (after a server left the cluster) must not lose another: its only spare is needed to
/// fill the gap, and the stream would stay short for good.
pub fn has_spare(allowed: &[&str], holders: &[String], replicas: usize) -> bool {
    let spares = allowed.iter().filter(|s| !holders.iter().any(|h| h == *s)).count();
    spares > replicas.saturating_sub(holders.len())
}

/// `SERVER.EVACUATE` moves every stream off `server`, and 2.15.1 drops the server from a
/// stream that has nowhere else to go, leaving it short a peer with nothing pending (an R3
/// stream on three servers stays on two: configured 3, two peers, no desired state). So a
/// server is evacuated only when every stream it holds (`streams`, the account's, other
/// runs' included) has a spare inside its placement; `Err` names the first that has not.
pub fn evacuation_leaves_room(streams: &[StreamInfoView], server: &str, tags_of: &BTreeMap<String, BTreeSet<String>>) -> Result<(), String> {
    for s in streams {
        let holders = peers(s);
        if holders.iter().any(|h| h == server) && !has_spare(&servers_with(tags_of, &s.config.placement.required()), &holders, s.config.num_replicas) {
            return Err(format!("stream {} (R{} on {}) has no spare for {server}", s.config.name, s.config.num_replicas, holders.join(", ")));
        }
    }
    Ok(())
}

/// `Ok` once `removed` is no longer one of the stream's peers.
pub fn peer_gone(info: &StreamInfoView, removed: &str) -> Result<(), String> {
    let now = peers(info);
    match now.iter().any(|p| p == removed) {
        // The peers named, leader first: a stalled removal shows what it stalled on.
        true => Err(format!("{removed} is still a peer (peers {})", now.join(", "))),
        false => Ok(()),
    }
}

/// A removal of `removed` from a stream that had `holders`, judged on `info`, given the
/// servers membership changes took out of the cluster since (`since`): `Ok(None)` when the
/// peer is gone; `Ok(Some(other))` when it is still there but another of `holders` was taken
/// out meanwhile (the server replaces that one from the group as it stands, and may keep or
/// take back `removed`: the later change wins); otherwise why it is not done.
pub fn removal_done(info: &StreamInfoView, removed: &str, holders: &[String], since: &[String]) -> Result<Option<String>, String> {
    match peer_gone(info, removed) {
        Ok(()) => Ok(None),
        Err(why) => since.iter().find(|s| holders.contains(s)).map(|other| Some(other.clone())).ok_or(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_removed_only_with_a_spare_beyond_what_the_stream_lacks() {
        let held = |h: &[&str]| h.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let three = ["n1", "n2", "n3-2"];
        assert!(!has_spare(&three, &held(&["n1", "n2", "n3-2"]), 3), "three servers, R3: nowhere to go");
        assert!(!has_spare(&three, &held(&["n1", "n2"]), 3), "short a peer: the one spare must fill the gap");
        assert!(has_spare(&three, &held(&["n1", "n2"]), 2), "R2 on three servers: one spare");
        let five = ["n1", "n2", "n3", "n4", "n5"];
        assert!(has_spare(&five, &held(&["n1", "n2"]), 3), "two spares for the gap and the replacement");
        assert!(!has_spare(&five[..3], &held(&["n1"]), 3), "two short, two spares: none left to replace");
    }

    #[test]
    fn a_server_is_evacuated_only_when_every_stream_on_it_can_move() {
        let stream = |name: &str, replicas: usize, on: &[&str]| {
            serde_json::from_value::<StreamInfoView>(serde_json::json!({
                "config": { "name": name, "num_replicas": replicas },
                "cluster": { "leader": on[0], "replicas": on[1..].iter().map(|n| serde_json::json!({ "name": n, "current": true })).collect::<Vec<_>>() }
            }))
            .unwrap()
        };
        let tags_of: BTreeMap<String, BTreeSet<String>> = ["n1", "n2", "n3"].iter().map(|n| (n.to_string(), BTreeSet::new())).collect();
        let r1 = stream("A", 1, &["n3"]);
        let r3 = stream("B", 3, &["n1", "n2", "n3"]);
        assert_eq!(evacuation_leaves_room(std::slice::from_ref(&r1), "n3", &tags_of), Ok(()));
        assert_eq!(evacuation_leaves_room(&[r1.clone(), r3.clone()], "n1", &tags_of).unwrap_err(), "stream B (R3 on n1, n2, n3) has no spare for n1");
        assert!(evacuation_leaves_room(&[r1, r3], "n3", &tags_of).is_err(), "the other stream on the server counts too");
        assert_eq!(evacuation_leaves_room(&[stream("C", 2, &["n1", "n2"])], "n3", &tags_of), Ok(()), "a stream not on the server is not moved");
    }

    fn view(json: &str) -> StreamInfoView {
        serde_json::from_str(json).unwrap()
    }

    fn tags(entries: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        entries.iter().map(|(n, t)| (n.to_string(), t.iter().map(|s| s.to_string()).collect())).collect()
    }

    #[test]
    fn versions_parse_and_order() {
        assert_eq!(Version::parse("2.15.1"), Some(Version(2, 15, 1)));
        assert_eq!(Version::parse("v2.12.1-RC.2"), Some(Version(2, 12, 1)));
        assert_eq!(Version::parse("2.11"), Some(Version(2, 11, 0)));
        assert_eq!(Version::parse("dev"), None);
        assert!(Version(2, 14, 6) < Version(2, 15, 0));
    }

    #[test]
    fn operations_new_in_2_15_are_not_sent_to_older_servers() {
        let old = Version::parse("2.14.6");
        let new = Version::parse("2.15.1");
        assert!(OpKind::PeerEvacuate.unsupported(old, true, true).is_some());
        assert!(OpKind::CancelMove.unsupported(old, true, true).is_some());
        assert!(OpKind::PeerEvacuate.unsupported(None, true, true).is_some());
        assert!(OpKind::PeerEvacuate.unsupported(new, true, true).is_none());
        assert!(OpKind::Move.unsupported(old, false, false).is_none());
        assert!(OpKind::MetaStepdown.unsupported(new, false, true).is_some());
        assert!(OpKind::MetaStepdown.unsupported(old, true, true).is_none());
        assert!(OpKind::ConsumerStepdown.unsupported(new, true, false).is_some());
        assert!(OpKind::ConsumerScale.unsupported(old, false, true).is_none());
        assert!(OpKind::ConsumerPeerRemove.unsupported(old, true, true).is_some());
        assert!(OpKind::ServerEvacuate.unsupported(new, false, true).is_some());
        assert!(OpKind::ServerEvacuate.unsupported(new, true, false).is_none());
    }

    #[test]
    fn placement_is_judged_on_every_peer_with_unknown_tags_unknown() {
        let known = tags(&[("n1", &["g0", "g2"]), ("n2", &["g0", "g1"]), ("n3", &["g1", "g2"])]);
        let on = |leader: &str, reps: &str| {
            view(&format!(r#"{{"config":{{"num_replicas":2,"placement":{{"tags":["g0"]}}}},"cluster":{{"leader":"{leader}","replicas":[{reps}]}}}}"#))
        };
        assert_eq!(placement_honoured(&on("n1", r#"{"name":"n2","current":true}"#), &known).0, Outcome::Held);
        let (outcome, why) = placement_honoured(&on("n1", r#"{"name":"n3","current":true}"#), &known);
        assert_eq!(outcome, Outcome::Failed, "{why}");
        assert_eq!(placement_honoured(&on("n9", r#"{"name":"n2","current":true}"#), &known).0, Outcome::Unknown);
        let free = view(r#"{"config":{"num_replicas":1},"cluster":{"leader":"n3"}}"#);
        assert_eq!(placement_honoured(&free, &known).0, Outcome::Held);
        assert_eq!(servers_with(&known, &["g1".into()]), vec!["n2", "n3"]);
        assert_eq!(servers_with(&known, &[]).len(), 3);
    }

    #[test]
    fn a_removed_peer_is_gone_when_neither_leader_nor_replica() {
        let v = view(r#"{"config":{"num_replicas":3},"cluster":{"leader":"n1","replicas":[{"name":"n2"},{"name":"n4"}]}}"#);
        assert_eq!(peers(&v), vec!["n1", "n2", "n4"]);
        assert!(peer_gone(&v, "n3").is_ok());
        assert!(peer_gone(&v, "n1").is_err());
        assert!(peer_gone(&v, "n4").is_err());
    }

    #[test]
    fn a_removal_still_undone_counts_as_superseded_only_after_another_holder_was_taken_out() {
        let held = |h: &[&str]| h.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // The CI case of 2026-12-03: n1 evacuated from [n2, n1], then n2 removed.
        let v = view(r#"{"config":{"num_replicas":2},"cluster":{"leader":"n3-2","replicas":[{"name":"n1"}]}}"#);
        let holders = held(&["n2", "n1"]);
        assert_eq!(removal_done(&v, "n1", &holders, &held(&["n2"])), Ok(Some("n2".to_string())));
        assert!(removal_done(&v, "n1", &holders, &[]).unwrap_err().contains("n1 is still a peer"));
        // A server that never held the stream supersedes nothing.
        assert!(removal_done(&v, "n1", &holders, &held(&["n4"])).is_err());
        assert_eq!(removal_done(&v, "n2", &holders, &held(&["n2"])), Ok(None));
    }
}
