//! When has a stream settled at a requested replica count?
//!
//! Settled means: the configured count is the requested one, a leader is present, the
//! other `n - 1` replicas are listed, current and online, and (2.15) the server reports no
//! pending desired-state change. `/healthz` on every node is checked by the caller.

use serde::Deserialize;

/// The parts of a raw `STREAM.INFO` reply this check reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamInfoView {
    pub config: ConfigView,
    #[serde(default)]
    pub cluster: Option<ClusterView>,
    #[serde(default)]
    pub state: StateView,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ConfigView {
    pub num_replicas: usize,
    #[serde(default)]
    pub placement: PlacementView,
}

/// Where the stream may be placed: servers of `cluster` (any, when unset) carrying every
/// one of `tags`.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
pub struct PlacementView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
}

impl PlacementView {
    /// The placement as tags a server must carry; a server's cluster counts as the tag
    /// `cluster:<name>` (see [`crate::operations::CLUSTER_TAG`]).
    pub fn required(&self) -> Vec<String> {
        let cluster = self.cluster.iter().filter(|c| !c.is_empty()).map(|c| format!("{}{c}", crate::operations::CLUSTER_TAG));
        self.tags.iter().cloned().chain(cluster).collect()
    }

    pub fn is_set(&self) -> bool {
        !self.required().is_empty()
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct StateView {
    #[serde(default)]
    pub messages: u64,
    #[serde(default)]
    pub first_seq: u64,
    #[serde(default)]
    pub last_seq: u64,
    #[serde(default)]
    pub num_deleted: u64,
    /// Interior deleted sequences (only when asked for with `deleted_details`).
    #[serde(default)]
    pub deleted: Option<Vec<u64>>,
    /// Messages the server knows it lost (a damaged store found on recovery).
    #[serde(default)]
    pub lost: Option<LostView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct LostView {
    #[serde(default)]
    pub msgs: Option<Vec<u64>>,
    #[serde(default)]
    pub bytes: u64,
}

impl StateView {
    /// Up to ten acknowledged sequences (1 ..= `last_acked`) the stream no longer holds:
    /// a prefix before `first_seq`, interior deletes, or what the server reports lost. The
    /// workload never deletes, and the stream has no limits, so any of them is a lost
    /// acknowledged message.
    pub fn acked_missing(&self, last_acked: u64) -> Vec<u64> {
        // An empty stream (first_seq 0 or past its last) holds none of them.
        let first = if self.messages == 0 { last_acked + 1 } else { self.first_seq };
        let prefix = 1..first.min(last_acked + 1);
        let interior = self.deleted.iter().flatten().copied().filter(|s| (1..=last_acked).contains(s));
        let mut missing: Vec<u64> = prefix.chain(interior).chain(self.lost_acked(last_acked)).take(20).collect();
        missing.sort_unstable();
        missing.dedup();
        missing.truncate(10);
        missing
    }

    /// Acknowledged sequences the server itself reports lost.
    pub fn lost_acked(&self, last_acked: u64) -> impl Iterator<Item = u64> + '_ {
        let lost = self.lost.as_ref().and_then(|l| l.msgs.as_ref());
        lost.into_iter().flatten().copied().filter(move |s| *s <= last_acked)
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ClusterView {
    #[serde(default)]
    pub leader: Option<String>,
    #[serde(default)]
    pub replicas: Vec<ReplicaView>,
    /// 2.15's desired-state block: present while a change is still being carried out.
    #[serde(default)]
    pub desired: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ReplicaView {
    pub name: String,
    #[serde(default)]
    pub current: bool,
    #[serde(default)]
    pub offline: bool,
}

/// `Ok` when settled at `requested`, otherwise why not.
pub fn settled(info: &StreamInfoView, requested: usize) -> Result<(), String> {
    if info.config.num_replicas != requested {
        return Err(format!("configured replicas {} != requested {requested}", info.config.num_replicas));
    }
    let cluster = info.cluster.as_ref().ok_or("no cluster information")?;
    if cluster.leader.as_deref().unwrap_or("").is_empty() {
        return Err("no leader".into());
    }
    if cluster.desired.is_some() {
        return Err("desired-state change still pending".into());
    }
    if cluster.replicas.len() != requested - 1 {
        return Err(format!("{} followers listed, want {}", cluster.replicas.len(), requested - 1));
    }
    if let Some(r) = cluster.replicas.iter().find(|r| !r.current || r.offline) {
        return Err(format!("replica {} not current (offline: {})", r.name, r.offline));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(json: &str) -> StreamInfoView {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn acked_missing_finds_prefix_and_interior_holes_below_the_last_ack() {
        let st = |first_seq, deleted: Option<Vec<u64>>| StateView { first_seq, deleted, messages: 100, ..Default::default() };
        assert!(st(1, None).acked_missing(100).is_empty());
        assert!(st(0, None).acked_missing(0).is_empty(), "empty stream, nothing acked");
        assert_eq!(st(4, None).acked_missing(100), vec![1, 2, 3]);
        assert_eq!(st(1, Some(vec![50, 150])).acked_missing(100), vec![50], "150 was never acked");
        assert!(st(120, None).acked_missing(5).len() == 5);
        let reset = StateView { first_seq: 0, last_seq: 0, messages: 0, deleted: Some(vec![0]), ..Default::default() };
        assert_eq!(reset.acked_missing(68729), (1..=10).collect::<Vec<_>>(), "a stream reset to empty lost every ack (recorded on 2.10.25)");
    }

    #[test]
    fn sequences_the_server_reports_lost_count_as_missing_when_acked() {
        let info = view(r#"{"config":{"num_replicas":1},"state":{"messages":97,"first_seq":1,"last_seq":100,
            "lost":{"msgs":[40,41,140],"bytes":300}}}"#);
        assert_eq!(info.state.acked_missing(100), vec![40, 41], "140 was never acked");
        assert!(info.state.acked_missing(39).is_empty());
        let none = view(r#"{"config":{"num_replicas":1},"state":{"messages":3,"first_seq":1,"last_seq":3,"lost":null}}"#);
        assert!(none.state.acked_missing(3).is_empty());
    }

    #[test]
    fn settled_requires_leader_current_followers_and_no_desired_block() {
        let ok = view(r#"{"config":{"num_replicas":3},"cluster":{"leader":"n1","replicas":[
            {"name":"n2","current":true},{"name":"n3","current":true}]}}"#);
        assert_eq!(settled(&ok, 3), Ok(()));
        assert!(settled(&ok, 1).is_err());
        let lagging = view(r#"{"config":{"num_replicas":3},"cluster":{"leader":"n1","replicas":[
            {"name":"n2","current":true},{"name":"n3","current":false}]}}"#);
        assert!(settled(&lagging, 3).is_err());
        let pending = view(r#"{"config":{"num_replicas":1},"cluster":{"leader":"n1","desired":{"peers":[]}}}"#);
        assert!(settled(&pending, 1).is_err());
        let leaderless = view(r#"{"config":{"num_replicas":1},"cluster":{}}"#);
        assert!(settled(&leaderless, 1).is_err());
        let r1 = view(r#"{"config":{"num_replicas":1},"cluster":{"leader":"n1"},"state":{"messages":5,"last_seq":5}}"#);
        assert_eq!(settled(&r1, 1), Ok(()));
    }
}
