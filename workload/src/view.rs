//! Who does what in the cluster right now: the meta leader, the stream's leader and
//! followers (and which of them are still catching up), and the scale requests as they are
//! made. The monitor refreshes it every two seconds and the operator announces its requests;
//! the fault injector asks it whom to strike, as Jepsen's nemeses target primaries.

use properties::scale::StreamInfoView;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use tokio::sync::watch;

/// What a node is for the run's stream and the cluster, at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Leads the meta group (stream and consumer assignments, scale decisions).
    MetaLeader,
    /// Leads the stream's Raft group.
    StreamLeader,
    /// Holds the only replica of an R1 stream.
    SoleReplica,
    /// Listed as a replica but not current: being added by a scale or catching up.
    CatchingUp,
    /// A current follower of the stream.
    Follower,
}

#[derive(Clone, Debug, Default)]
struct Snapshot {
    meta_leader: Option<String>,
    stream_leader: Option<String>,
    /// Every listed follower, with whether it is current.
    followers: Vec<(String, bool)>,
    replicas: usize,
    /// The server holding the durable consumer's only replica, when it has one.
    durable_sole: Option<String>,
}

/// The shared view; cheap to read, refreshed by the monitor.
pub struct ClusterView {
    snapshot: Mutex<Snapshot>,
    /// Counts the operator's changes of replicas or peers: the injector may strike right
    /// after one.
    changes: watch::Sender<u64>,
    /// Each server's placement tags, by name, as its `/varz` gave them.
    tags: Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// Copies of the stream that hold everything its leader holds, each read from its own
    /// node, with the wipe generation the look began in (see [`ClusterView::wiping`]).
    copies: Mutex<(u64, usize)>,
    wipes: std::sync::atomic::AtomicU64,
}

impl Default for ClusterView {
    fn default() -> Self {
        Self { snapshot: Mutex::default(), changes: watch::channel(0).0, tags: Mutex::default(), copies: Mutex::default(), wipes: Default::default() }
    }
}

impl ClusterView {
    /// What STREAM.INFO (from the stream leader) says now.
    pub fn saw_stream(&self, info: &StreamInfoView) {
        let Ok(mut s) = self.snapshot.lock() else { return };
        s.replicas = info.config.num_replicas;
        match &info.cluster {
            Some(c) => {
                s.stream_leader = c.leader.clone().filter(|l| !l.is_empty());
                s.followers = c.replicas.iter().map(|r| (r.name.clone(), r.current && !r.offline)).collect();
            }
            None => {
                s.stream_leader = None;
                s.followers.clear();
            }
        }
    }

    /// Where the durable consumer's only replica is (None: replicated, or unknown).
    pub fn saw_durable(&self, sole: Option<String>) {
        if let Ok(mut s) = self.snapshot.lock() {
            s.durable_sole = sole.filter(|l| !l.is_empty());
        }
    }

    /// The server holding the durable consumer's only replica, at the last look.
    pub fn durable_sole(&self) -> Option<String> {
        self.snapshot.lock().ok().and_then(|s| s.durable_sole.clone())
    }

    /// The meta leader as a node's `/jsz` names it.
    pub fn saw_meta_leader(&self, leader: Option<String>) {
        if let Ok(mut s) = self.snapshot.lock() {
            s.meta_leader = leader.filter(|l| !l.is_empty());
        }
    }

    /// Servers' tags, from their `/varz`: replaces what was known when all `of` nodes
    /// answered, else adds to it.
    pub fn saw_tags(&self, seen: BTreeMap<String, BTreeSet<String>>, of: usize) {
        if let Ok(mut t) = self.tags.lock() {
            if seen.len() == of {
                *t = seen;
            } else {
                t.extend(seen);
            }
        }
    }

    /// Every server seen so far, with its tags.
    pub fn tags_of(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.tags.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// The operator changed the stream's replicas or peers just now (a scale, a move, a
    /// peer removal): the injector may strike right after.
    pub fn peers_changing(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    /// Wakes on every change of replicas or peers.
    pub fn peer_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Whether, at the last look, the stream had a leader and every one of its (at least
    /// `copies`) replicas was listed. Whether each copy is whole is not the leader's word
    /// ("current" is both late under steady writes on a slow disk and, on 2.15.1, early
    /// for a follower far behind): [`ClusterView::complete_copies`] reads every node.
    pub fn settled_with_copies(&self, copies: usize) -> bool {
        let Ok(s) = self.snapshot.lock() else { return false };
        s.replicas >= copies && s.stream_leader.is_some() && s.followers.len() + 1 == s.replicas
    }

    /// The wipe generation, read before a look at the copies begins.
    pub fn wipe_generation(&self) -> u64 {
        self.wipes.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A look that began in wipe generation `generation` found `complete` whole copies.
    pub fn saw_copies(&self, generation: u64, complete: usize) {
        if let Ok(mut c) = self.copies.lock() {
            *c = (generation, complete);
        }
    }

    /// A server's store is about to be wiped: every look at the copies begun before counts
    /// for nothing (it may have counted that server's copy).
    pub fn wiping(&self) {
        self.wipes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whole copies of the stream at the last look begun since the last wipe (0 if none).
    pub fn complete_copies(&self) -> usize {
        let generation = self.wipe_generation();
        self.copies.lock().map(|c| if c.0 == generation { c.1 } else { 0 }).unwrap_or(0)
    }

    /// The stream's leader at the last look.
    pub fn stream_leader(&self) -> Option<String> {
        self.snapshot.lock().ok().and_then(|s| s.stream_leader.clone())
    }

    /// The roles of the node named `node`, most interesting first (empty: a bystander).
    pub fn roles(&self, node: &str) -> Vec<Role> {
        let Ok(s) = self.snapshot.lock() else { return Vec::new() };
        let mut roles = Vec::new();
        if s.meta_leader.as_deref() == Some(node) {
            roles.push(Role::MetaLeader);
        }
        if s.stream_leader.as_deref() == Some(node) {
            roles.push(if s.replicas == 1 { Role::SoleReplica } else { Role::StreamLeader });
        }
        if let Some((_, current)) = s.followers.iter().find(|(name, _)| name == node) {
            roles.push(if *current { Role::Follower } else { Role::CatchingUp });
        }
        roles.sort();
        roles
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(json: &str) -> StreamInfoView {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn roles_follow_what_the_stream_and_meta_group_say() {
        let v = ClusterView::default();
        assert!(v.roles("n1").is_empty(), "nothing seen yet");
        v.saw_stream(&info(r#"{"config":{"num_replicas":3},"cluster":{"leader":"n1","replicas":[
            {"name":"n2","current":true},{"name":"n3","current":false}]}}"#));
        v.saw_meta_leader(Some("n2".into()));
        assert_eq!(v.roles("n1"), vec![Role::StreamLeader]);
        assert_eq!(v.roles("n2"), vec![Role::MetaLeader, Role::Follower]);
        assert_eq!(v.roles("n3"), vec![Role::CatchingUp]);
        v.saw_stream(&info(r#"{"config":{"num_replicas":1},"cluster":{"leader":"n3"}}"#));
        assert_eq!(v.roles("n3"), vec![Role::SoleReplica]);
        assert_eq!(v.roles("n1"), Vec::<Role>::new());
        let scales = v.peer_changes();
        v.peers_changing();
        assert!(scales.has_changed().unwrap());
    }

    #[test]
    fn a_look_at_the_copies_begun_before_a_wipe_counts_for_nothing() {
        let v = ClusterView::default();
        assert_eq!(v.complete_copies(), 0, "no look yet");
        let before = v.wipe_generation();
        v.saw_copies(before, 2);
        assert_eq!(v.complete_copies(), 2);
        v.wiping();
        assert_eq!(v.complete_copies(), 0);
        v.saw_copies(before, 2); // a look that was under way during the wipe
        assert_eq!(v.complete_copies(), 0);
        v.saw_copies(v.wipe_generation(), 2);
        assert_eq!(v.complete_copies(), 2);
    }
}
