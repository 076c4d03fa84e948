//! Do the stream's replicas hold the same messages as its leader?
//!
//! Every node's monitoring endpoint reports the state of the replica that node holds, not
//! the leader's. A replica that lost or diverged its data and leads only for short
//! stretches is invisible to checks that ask the stream leader; comparing each current
//! replica with the leader is not.

use crate::{Property, Violation};
use serde::Serialize;
use serde_json::json;

/// One node's view of its own replica of the stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReplicaState {
    pub node: String,
    pub first_seq: u64,
    pub last_seq: u64,
    pub messages: u64,
    pub num_deleted: u64,
    pub bytes: u64,
}

/// What one comparison of every current replica with the leader shows.
#[derive(Clone, Debug, PartialEq)]
pub enum Agreement {
    Agree,
    /// These replicas hold a prefix of the leader's messages: they may still catch up.
    Lagging { nodes: Vec<String> },
    /// A replica holds something the leader's state cannot explain.
    Disagree(Violation),
}

/// Compares each follower with the leader. `at_rest`: nothing writes to the stream any
/// more, so every replica must equal the leader (first and last sequence, message and
/// deleted counts). While writes go on, the nodes are asked at slightly different instants:
/// a replica may then be ahead of or behind the leader by a tail of messages, but must
/// have the same first sequence and deleted count, and as many more (or fewer) messages as
/// it has more (or fewer) sequences.
pub fn judge(leader: &ReplicaState, followers: &[ReplicaState], at_rest: bool) -> Agreement {
    let mut lagging = Vec::new();
    for r in followers {
        if r.last_seq == 0 && r.messages == 0 && leader.last_seq > 0 {
            lagging.push(r.node.clone()); // has nothing yet: still catching up
            continue;
        }
        let tail = r.last_seq as i128 - leader.last_seq as i128;
        let consistent = r.first_seq == leader.first_seq
            && r.num_deleted == leader.num_deleted
            && r.messages as i128 - leader.messages as i128 == tail;
        let problem = if !consistent {
            Some("holds other sequences than the leader, not just a longer or shorter tail")
        } else if at_rest && tail > 0 {
            Some("holds sequences beyond the leader's last one while nothing writes to the stream")
        } else {
            None
        };
        if let Some(problem) = problem {
            return Agreement::Disagree(Violation::new(
                Property::ReplicasAgree,
                json!({ "leader": leader, "replica": r, "at_rest": at_rest, "problem": problem }),
            ));
        }
        if at_rest && tail < 0 {
            lagging.push(r.node.clone());
        }
    }
    if lagging.is_empty() { Agreement::Agree } else { Agreement::Lagging { nodes: lagging } }
}

/// A replica still lagging when its time ran out: it never caught up with a stream nobody
/// writes to.
pub fn never_caught_up(leader: &ReplicaState, followers: &[ReplicaState], nodes: &[String]) -> Violation {
    let behind: Vec<&ReplicaState> = followers.iter().filter(|r| nodes.contains(&r.node)).collect();
    Violation::new(
        Property::ReplicasAgree,
        json!({ "leader": leader, "replicas": behind, "at_rest": true,
                "problem": "current replicas stayed behind the leader of a stream nobody writes to" }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(node: &str, first_seq: u64, last_seq: u64, messages: u64, num_deleted: u64) -> ReplicaState {
        ReplicaState { node: node.into(), first_seq, last_seq, messages, num_deleted, bytes: messages * 100 }
    }

    fn disagrees(a: Agreement) -> bool {
        matches!(a, Agreement::Disagree(v) if v.property == Property::ReplicasAgree)
    }

    #[test]
    fn equal_replicas_agree_at_rest_and_while_writes_go_on() {
        let l = st("n1", 1, 500, 500, 0);
        for at_rest in [true, false] {
            assert_eq!(judge(&l, &[st("n2", 1, 500, 500, 0), st("n3", 1, 500, 500, 0)], at_rest), Agreement::Agree);
        }
    }

    /// Recorded from a live 3-node 2.15.1 cluster under load: the three nodes were asked
    /// within a few milliseconds of each other.
    #[test]
    fn a_moving_tail_is_not_a_disagreement_while_writes_go_on() {
        let leader = st("n2", 1, 127_154, 127_154, 0);
        let followers = [st("n1", 1, 125_715, 125_715, 0), st("n3", 1, 128_494, 128_494, 0)];
        assert_eq!(judge(&leader, &followers, false), Agreement::Agree);
        assert!(disagrees(judge(&leader, &followers, true)), "n3 ahead of the leader at rest");
        assert_eq!(judge(&leader, &followers[..1], true), Agreement::Lagging { nodes: vec!["n1".into()] });
    }

    #[test]
    fn a_replica_missing_messages_or_starting_later_disagrees() {
        let l = st("n1", 1, 500, 500, 0);
        assert!(disagrees(judge(&l, &[st("n2", 1, 500, 499, 1)], false)), "a hole the leader does not have");
        assert!(disagrees(judge(&l, &[st("n2", 1, 500, 490, 0)], false)), "fewer messages than sequences");
        assert!(disagrees(judge(&l, &[st("n2", 101, 500, 400, 0)], true)), "a lost prefix");
        assert!(disagrees(judge(&l, &[st("n2", 1, 400, 399, 0)], false)));
    }

    #[test]
    fn an_empty_replica_is_still_catching_up() {
        let l = st("n1", 1, 500, 500, 0);
        assert_eq!(judge(&l, &[st("n2", 0, 0, 0, 0)], true), Agreement::Lagging { nodes: vec!["n2".into()] });
        let empty = st("n1", 0, 0, 0, 0);
        assert_eq!(judge(&empty, &[st("n2", 0, 0, 0, 0)], true), Agreement::Agree, "both empty: equal, not lagging");
        let v = never_caught_up(&l, &[st("n2", 0, 0, 0, 0)], &["n2".into()]);
        assert_eq!(v.property, Property::ReplicasAgree);
        assert_eq!(v.details["replicas"][0]["node"], "n2");
    }
}
