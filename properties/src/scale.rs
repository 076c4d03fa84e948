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
    /// Absent in replies that name the stream elsewhere.
    #[serde(default)]
    pub name: String,
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
    group_settled(info, requested)
}

/// `Ok` when a consumer (its `CONSUMER.INFO` reply, read with the same view) has settled at
/// its replica count: its own, or with 0 the stream's (`stream_replicas`).
pub fn consumer_settled(info: &StreamInfoView, stream_replicas: usize) -> Result<(), String> {
    let want = match info.config.num_replicas {
        0 => stream_replicas,
        n => n,
    };
    group_settled(info, want.max(1))
}

/// Leader present, no change pending, `requested - 1` followers all current and online.
fn group_settled(info: &StreamInfoView, requested: usize) -> Result<(), String> {
    let cluster = info.cluster.as_ref().ok_or("no cluster information")?;
    if cluster.leader.as_deref().unwrap_or("").is_empty() {
        return Err("no leader".into());
    }
    if let Some(desired) = &cluster.desired {
        // The block and the peers now (leader first) show what the change waits for.
        let now = crate::operations::peers(info).join(", ");
        return Err(format!("desired-state change still pending (desired {desired}; peers now {now})"));
    }
    if cluster.replicas.len() != requested - 1 {
        let names: Vec<&str> = cluster.replicas.iter().map(|r| r.name.as_str()).collect();
        return Err(format!("{} followers listed ({}), want {}", names.len(), names.join(", "), requested - 1));
    }
    if let Some(r) = cluster.replicas.iter().find(|r| !r.current || r.offline) {
        return Err(format!("replica {} not current (offline: {})", r.name, r.offline));
    }
    Ok(())
}

/// The least a change's gap must close for that to count as progress, on top of what the
/// looks' own timing explains (see [`CatchUp::observe`]).
pub const CATCH_UP_STEP: u64 = 1000;

/// Catch-up progress of a change that adds replicas (scale up, move, peer removal or
/// evacuation): copying a large stream to a new peer under full publishing can take longer
/// than one liveness window, so each new low of the gap between the furthest and the
/// slowest replica of the peer set starts the settle window over. The rule has no rate in
/// it: a copy that closes its gap slowly (a 4 M-message move at a net thousand messages a
/// second) progresses as surely as a fast one. Only noise is discounted: the peers are read
/// one after another, so a look's gap is off by at most what was published while it ran,
/// and a new low must beat the old one by more than both looks' noise and a whole step.
/// A change whose gap stops shrinking (or that stays pending with no gap) still runs out.
///
/// A setback starts the count over as well: the slowest peer now holds less than at the
/// last look, and either a fault struck in between (a restarted copy that lost ground, as
/// 2.15.1 does after "catchup failed, too many retries") or a peer joined (a change adding
/// its peers one at a time). Measured from the old low, such a change could not show
/// progress again before the window ran out. A peer going backwards with neither is not
/// excused: a copy the server restarts by itself, fault-free, still runs out.
#[derive(Clone, Debug, Default)]
pub struct CatchUp {
    /// The lowest gap seen, and the noise of the look that saw it.
    lowest: Option<(u64, u64)>,
    /// The peer set and its slowest peer's last sequence at the last look.
    last: Option<(std::collections::BTreeSet<String>, u64)>,
}

impl CatchUp {
    /// Records one look (each peer with its own last sequence; `struck`: a fault started
    /// since the last look; `noise`: messages acknowledged while the look ran); true when
    /// it counts as progress.
    pub fn observe(&mut self, peers: &[(String, u64)], struck: bool, noise: u64) -> bool {
        let seqs: Vec<u64> = peers.iter().map(|(_, s)| *s).collect();
        let gap = catch_up_gap(&seqs);
        let slowest = seqs.iter().copied().min().unwrap_or(0);
        let names: std::collections::BTreeSet<String> = peers.iter().map(|(n, _)| n.clone()).collect();
        let setback = self.last.as_ref().is_some_and(|(before, slowest_before)| slowest < *slowest_before && (struck || !names.is_subset(before)));
        self.last = Some((names, slowest));
        let progressed = match self.lowest {
            Some(_) if setback => true,
            Some((low, low_noise)) => gap + CATCH_UP_STEP + noise + low_noise <= low,
            None => false,
        };
        if progressed || self.lowest.is_none() {
            self.lowest = Some((gap, noise));
        }
        progressed
    }
}

/// The gap between the furthest and the slowest replica, from each peer's own last
/// sequence (a peer holding nothing yet counts as 0).
pub fn catch_up_gap(last_seqs: &[u64]) -> u64 {
    let (lo, hi) = last_seqs.iter().fold((u64::MAX, 0), |(lo, hi), &s| (lo.min(s), hi.max(s)));
    hi.saturating_sub(lo)
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
        assert_eq!(settled(&pending, 1), Err(r#"desired-state change still pending (desired {"peers":[]}; peers now n1)"#.into()));
        let leaderless = view(r#"{"config":{"num_replicas":1},"cluster":{}}"#);
        assert!(settled(&leaderless, 1).is_err());
        let r1 = view(r#"{"config":{"num_replicas":1},"cluster":{"leader":"n1"},"state":{"messages":5,"last_seq":5}}"#);
        assert_eq!(settled(&r1, 1), Ok(()));
    }

    #[test]
    fn a_consumer_with_replicas_zero_settles_at_its_streams_count() {
        let follows = view(r#"{"config":{"num_replicas":0},"cluster":{"leader":"n1","replicas":[
            {"name":"n2","current":true},{"name":"n3","current":true}]}}"#);
        assert_eq!(consumer_settled(&follows, 3), Ok(()));
        assert!(consumer_settled(&follows, 1).is_err(), "the stream went to R1, the consumer not yet");
        let own = view(r#"{"config":{"num_replicas":1},"cluster":{"leader":"n2"}}"#);
        assert_eq!(consumer_settled(&own, 3), Ok(()));
        let not_started = view(r#"{"config":{"num_replicas":0},"cluster":{"leader":""}}"#);
        assert!(consumer_settled(&not_started, 1).is_err());
    }

    #[test]
    fn catch_up_progress_is_a_new_low_of_the_gap_beyond_the_looks_noise() {
        let mut c = CatchUp::default();
        let mut look = |leader: u64, behind: u64, noise: u64| c.observe(&[("n1".into(), leader), ("n2".into(), leader - behind)], false, noise);
        assert!(!look(300_000, 300_000, 0), "the first look sets the mark");
        assert!(look(300_000, 250_000, 0), "closed by 50k: progress");
        assert!(look(300_000, 248_000, 0), "2k is progress however large the gap: no rate is asked for");
        assert!(!look(300_000, 247_500, 0), "under a whole step");
        assert!(!look(500_000, 400_000, 0), "publishing outran the copy: no progress");
        assert!(!look(500_000, 240_000, 8_000), "8k closer, but 8k were acked while the peers were read");
        assert!(look(500_000, 230_000, 8_000), "beyond both looks' noise and a step");
        assert!(!look(500_000, 222_500, 0), "the low's own noise counts too: 7.5k < 8k + 1k");
        assert!(look(500_000, 500, 0));
        assert!(!look(500_000, 0, 0), "a caught-up peer set jitters by less than a step: a change pending with no gap runs out");
    }

    #[test]
    fn a_copy_set_back_by_a_fault_or_a_joining_peer_counts_again_from_there() {
        let peers = |leader: u64, slow: &str, at: u64| vec![("n5".to_string(), leader), (slow.to_string(), at)];
        let mut c = CatchUp::default();
        assert!(!c.observe(&peers(600_000, "n2", 100_000), false, 0));
        assert!(c.observe(&peers(620_000, "n2", 200_000), false, 0), "closed by 80k");
        assert!(!c.observe(&peers(640_000, "n2", 98_000), false, 0), "went backwards with no fault: not excused");
        assert!(!c.observe(&peers(650_000, "n2", 150_000), false, 0), "still above the old low");
        assert!(c.observe(&peers(660_000, "n2", 90_000), true, 0), "a fault set the copy back: the count starts over");
        assert!(c.observe(&peers(670_000, "n2", 200_000), false, 0), "a new low measured from the setback");
        assert!(c.observe(&peers(680_000, "n3", 0), false, 0), "the next peer joined empty");
        assert!(!c.observe(&peers(690_000, "n3", 1_000), false, 0));
    }

    #[test]
    fn the_gap_is_between_the_furthest_and_the_slowest_peer() {
        assert_eq!(catch_up_gap(&[414_072, 177_989]), 236_083);
        assert_eq!(catch_up_gap(&[10, 0, 12]), 12, "a peer holding nothing yet is the slowest");
        assert_eq!(catch_up_gap(&[]), 0);
    }
}
