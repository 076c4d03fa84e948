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
    /// Each node's server name and placement tags, by the node's place in the cluster's
    /// list, as its `/varz` last gave them.
    tags: Mutex<BTreeMap<usize, (String, BTreeSet<String>)>>,
    /// The nodes whose `/varz` did not answer the latest look: their names may be stale.
    tags_stale: Mutex<BTreeSet<usize>>,
    /// Copies of the stream that hold everything its leader holds, each read from its own
    /// node, with the wipe generation the look began in (see [`ClusterView::wiping`]).
    copies: Mutex<(u64, usize)>,
    wipes: std::sync::atomic::AtomicU64,
    /// Who is taking a copy of the stream away right now (see [`ClusterView::taking`]).
    taker: Mutex<Taker>,
    /// The stream this view is about now (a long run rotates to a fresh one now and then).
    stream: Mutex<String>,
}

/// Two actors take copies of the stream away: the fault injector (a membership change wipes
/// a server, a disk fault damages it) and the operator (a scale down or `PEER.REMOVE` drops
/// a peer at once, before any replacement holds the data). Each checks that a second whole
/// copy exists before it acts, but from a look that the other's act, made meanwhile, makes
/// stale: a peer removal on an R2 stream and a wipe of its other server 0.7 s later left
/// no copy at all (2.15.1, seed 21, 5 nodes: 1,238,681 acks gone). So a fault waits for
/// the operator's drops to be seen carried out, and the operator drops nothing while a
/// fault destroys a copy. Drops may overlap: the server orders them.
#[derive(Debug, Default)]
struct Taker {
    /// A data-destroying fault, from the strike until it ends.
    fault: bool,
    /// The operator's drops not yet seen carried out.
    drops: Vec<PeerDrop>,
}

/// One drop, until a look begun after it (`generation`) shows it carried out (at most
/// `replicas` peers, `gone` not among them) or `until` passes (a request the meta group
/// never carried out).
#[derive(Debug)]
struct PeerDrop {
    gone: Option<String>,
    replicas: usize,
    generation: u64,
    until: std::time::Instant,
}

impl Default for ClusterView {
    fn default() -> Self {
        Self {
            snapshot: Mutex::default(),
            changes: watch::channel(0).0,
            tags: Mutex::default(),
            tags_stale: Mutex::default(),
            copies: Mutex::default(),
            wipes: Default::default(),
            taker: Mutex::default(),
            stream: Mutex::default(),
        }
    }
}

impl ClusterView {
    /// From now on the view is about `stream`, a fresh one: what it knew of the last
    /// stream's leader, followers, copies and the operator's drops is forgotten (the meta
    /// leader, the nodes' tags and a data-destroying fault under way are the cluster's, kept).
    pub fn start_stream(&self, stream: &str) {
        if let Ok(mut s) = self.stream.lock() {
            stream.clone_into(&mut s);
        }
        if let Ok(mut s) = self.snapshot.lock() {
            *s = Snapshot { meta_leader: s.meta_leader.take(), ..Snapshot::default() };
        }
        if let Ok(mut c) = self.copies.lock() {
            c.1 = 0;
        }
        if let Ok(mut t) = self.taker.lock() {
            t.drops.clear();
        }
    }

    /// The stream this view is about (empty until [`ClusterView::start_stream`]).
    pub fn stream(&self) -> String {
        self.stream.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// What STREAM.INFO (from the stream leader) says now, from a look begun in wipe
    /// generation `generation` (read before the request went out).
    pub fn saw_stream(&self, info: &StreamInfoView, generation: u64) {
        if let Ok(mut t) = self.taker.lock() {
            let peers = properties::operations::peers(info);
            let now = std::time::Instant::now();
            t.drops.retain(|d| {
                let done = generation >= d.generation && peers.len() <= d.replicas && d.gone.as_ref().is_none_or(|g| !peers.contains(g));
                !done && now < d.until
            });
        }
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

    /// Node `i`'s server name and tags, from its `/varz`. A node that came back under a new
    /// name after a membership change replaces its old name: the removed server must not
    /// count as a spare (an evacuation judged on such a stale name, while another node did
    /// not answer, left an R3 stream on three servers short for good: CI, 2026-12-03).
    pub fn saw_tags(&self, i: usize, name: String, tags: BTreeSet<String>) {
        if let Ok(mut t) = self.tags.lock() {
            t.insert(i, (name, tags));
        }
        if let Ok(mut stale) = self.tags_stale.lock() {
            stale.remove(&i);
        }
    }

    /// Node `i` did not answer for its name and tags: what was seen of it stays (for
    /// placement checks) but is no longer vouched for ([`ClusterView::answering_tags_of`]).
    pub fn missed_tags(&self, i: usize) {
        if let Ok(mut stale) = self.tags_stale.lock() {
            stale.insert(i);
        }
    }

    /// The servers that answered the latest look, with their tags: the only ones that may
    /// count as a spare before a peer is dropped. A node that went away and came back under
    /// a new name while it did not answer would otherwise be counted under its old name, a
    /// spare that does not exist (a CI run evacuated the third of three servers that way,
    /// leaving the stream short a peer for good).
    pub fn answering_tags_of(&self) -> BTreeMap<String, BTreeSet<String>> {
        let stale = self.tags_stale.lock().map(|s| s.clone()).unwrap_or_default();
        self.tags.lock().map(|t| t.iter().filter(|(i, _)| !stale.contains(i)).map(|(_, v)| v.clone()).collect()).unwrap_or_default()
    }

    /// Every server now in the cluster (each node under its latest name), with its tags.
    pub fn tags_of(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.tags.lock().map(|t| t.values().cloned().collect()).unwrap_or_default()
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

    /// The injector is about to destroy a copy (true), unless the operator is dropping one
    /// (false). Looks begun before count for nothing. Ends with [`ClusterView::destroyed`].
    pub fn destroying(&self) -> bool {
        let Ok(mut t) = self.taker.lock() else { return false };
        if t.fault || !t.drops.is_empty() {
            return false;
        }
        t.fault = true;
        self.wiping();
        true
    }

    /// The data-destroying fault has ended (the server is back, empty or damaged).
    pub fn destroyed(&self) {
        if let Ok(mut t) = self.taker.lock() {
            t.fault = false;
        }
    }

    /// The operator is about to drop a peer (true): `gone` if it names it, leaving at most
    /// `replicas` (0 for a drop no look at the stream shows: it lasts until `at_most`);
    /// false while a fault destroys a copy. Looks begun before count for nothing. Ends by
    /// itself: see [`PeerDrop`].
    pub fn dropping(&self, gone: Option<&str>, replicas: usize, at_most: std::time::Duration) -> bool {
        let Ok(mut t) = self.taker.lock() else { return false };
        if t.fault {
            return false;
        }
        // Another wipe in between only makes the look that ends this drop a later one.
        self.wiping();
        let generation = self.wipe_generation();
        t.drops.push(PeerDrop { gone: gone.map(str::to_string), replicas, generation, until: std::time::Instant::now() + at_most });
        true
    }

    /// The operator's request was refused: nothing of it to wait for.
    pub fn not_dropped(&self, gone: Option<&str>, replicas: usize) {
        if let Ok(mut t) = self.taker.lock() {
            if let Some(i) = t.drops.iter().rposition(|d| d.gone.as_deref() == gone && d.replicas == replicas) {
                t.drops.remove(i);
            }
        }
    }

    /// Whether the injector or the operator is taking a copy away now.
    pub fn taking(&self) -> bool {
        self.taker.lock().map_or(true, |t| t.fault || !t.drops.is_empty())
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
    fn a_node_back_under_a_new_name_replaces_its_old_one() {
        let v = ClusterView::default();
        let tags = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        v.saw_tags(0, "n1".into(), tags(&["a"]));
        v.saw_tags(2, "n3".into(), tags(&["b"]));
        // A membership change: node 2 rejoins as n3-2, while node 1 has not answered yet.
        v.saw_tags(2, "n3-2".into(), tags(&["b"]));
        let known = v.tags_of();
        assert_eq!(known.keys().collect::<Vec<_>>(), ["n1", "n3-2"], "the removed name is no spare");
        assert_eq!(known["n3-2"], tags(&["b"]));
    }

    #[test]
    fn a_node_that_did_not_answer_is_no_spare_until_it_answers_again() {
        let v = ClusterView::default();
        let none = BTreeSet::new;
        v.saw_tags(0, "n1".into(), none());
        v.saw_tags(2, "n3".into(), none());
        // n3 rejoins as n3-2, but every look since has missed it: "n3" must not count.
        v.missed_tags(2);
        assert_eq!(v.tags_of().keys().collect::<Vec<_>>(), ["n1", "n3"], "kept for placement checks");
        assert_eq!(v.answering_tags_of().keys().collect::<Vec<_>>(), ["n1"]);
        v.saw_tags(2, "n3-2".into(), none());
        assert_eq!(v.answering_tags_of().keys().collect::<Vec<_>>(), ["n1", "n3-2"]);
    }

    #[test]
    fn roles_follow_what_the_stream_and_meta_group_say() {
        let v = ClusterView::default();
        assert!(v.roles("n1").is_empty(), "nothing seen yet");
        v.saw_stream(&info(r#"{"config":{"num_replicas":3},"cluster":{"leader":"n1","replicas":[
            {"name":"n2","current":true},{"name":"n3","current":false}]}}"#), 0);
        v.saw_meta_leader(Some("n2".into()));
        assert_eq!(v.roles("n1"), vec![Role::StreamLeader]);
        assert_eq!(v.roles("n2"), vec![Role::MetaLeader, Role::Follower]);
        assert_eq!(v.roles("n3"), vec![Role::CatchingUp]);
        v.saw_stream(&info(r#"{"config":{"num_replicas":1},"cluster":{"leader":"n3"}}"#), 0);
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

    #[test]
    fn a_copy_is_taken_by_a_fault_or_by_drops_never_both() {
        let r2 = |peers: &str| info(&format!(r#"{{"config":{{"num_replicas":2}},"cluster":{{"leader":"n1","replicas":[{peers}]}}}}"#));
        let long = std::time::Duration::from_secs(60);
        let v = ClusterView::default();
        assert!(v.destroying(), "nobody took a copy");
        assert!(!v.dropping(Some("n2"), 2, long), "no drop while a fault destroys a copy");
        v.destroyed();
        let before = v.wipe_generation();
        assert!(v.dropping(Some("n2"), 2, long));
        assert!(v.dropping(None, 1, long), "drops may overlap");
        assert!(!v.destroying() && v.taking());
        v.saw_stream(&r2(r#"{"name":"n3","current":false}"#), before);
        assert!(v.taking(), "a look begun before the drops shows nothing of them");
        let after = v.wipe_generation();
        v.saw_stream(&r2(r#"{"name":"n2","current":true}"#), after);
        assert!(v.taking(), "n2 is still a peer");
        v.saw_stream(&r2(r#"{"name":"n3","current":false}"#), after);
        assert!(v.taking(), "n2 has gone, but two peers are more than the scale down's one");
        v.not_dropped(None, 1);
        v.saw_stream(&r2(r#"{"name":"n3","current":false}"#), after);
        assert!(!v.taking() && v.destroying(), "the removal was carried out and the scale down refused");
        v.destroyed();
        assert!(v.dropping(None, 1, std::time::Duration::ZERO));
        v.saw_stream(&r2(r#"{"name":"n3","current":true}"#), 0);
        assert!(!v.taking(), "a drop never carried out ends at its deadline");
    }
}
