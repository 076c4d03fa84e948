//! The fault settings: the injector's switch and profile, each profile's schedule (built-in
//! and the file's), and the fault kinds with what each implies.

use super::Weights;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The local fault injector (`workload local`, and `workload run --docker-faults`;
/// Antithesis brings its own faults).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FaultsConfig {
    pub enabled: bool,
    /// The schedule in use: a name from `profiles` ("gentle" and "aggressive" are built in).
    pub profile: String,
    /// Delay added to each direction of a slowed link.
    #[serde(with = "humantime_serde")]
    pub latency: Duration,
    /// Named schedules. A file that names any replaces this table, but the built-in ones
    /// stay available under their names unless the file redefines them.
    pub profiles: BTreeMap<String, Schedule>,
}

/// One fault schedule: when faults come, which, on whom, and how the scaler plays along.
/// A field a user's profile leaves out takes the gentle profile's value.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Schedule {
    /// Fault types to draw from: kill, pause, restart, isolate, split, latency, membership,
    /// corrupt, snapshot-rollback (a kind listed n times is drawn n times as often).
    pub kinds: Vec<FaultKind>,
    /// Fault-free stretch between two fault periods, drawn from [off_min, off_max].
    #[serde(with = "humantime_serde")]
    pub off_min: Duration,
    #[serde(with = "humantime_serde")]
    pub off_max: Duration,
    /// Length of a fault period, drawn from [on_min, on_max].
    #[serde(with = "humantime_serde")]
    pub on_min: Duration,
    #[serde(with = "humantime_serde")]
    pub on_max: Duration,
    /// How long one fault lasts, drawn from [fault_min, fault_max].
    #[serde(with = "humantime_serde")]
    pub fault_min: Duration,
    #[serde(with = "humantime_serde")]
    pub fault_max: Duration,
    /// Fault-free gap inside a fault period: after a fault ends (or starts, when several
    /// may overlap) the next one waits [gap_min, gap_max], so the cluster gets to act
    /// (publish, elect, scale) between strikes.
    #[serde(with = "humantime_serde")]
    pub gap_min: Duration,
    #[serde(with = "humantime_serde")]
    pub gap_max: Duration,
    /// Nodes faulty at once; 0 means a minority ((nodes - 1) / 2, at least 1), or a bare
    /// majority with `majority`.
    pub max_faulty: usize,
    /// With `max_faulty = 0`: faults may overlap on a bare majority (nodes / 2 + 1, at most
    /// nodes - 1: two of three, three of five), so groups lose quorum and regain it, as the
    /// nemesis that found seed 000's lost writes killed a majority.
    pub majority: bool,
    /// Chance that a kill or a pause strikes every node the fault budget has left at once
    /// (a coordinated crash of a majority with `majority`), rather than one.
    pub together: f64,
    /// Chance that a fault strikes a node whose role matters right now (the sole replica
    /// of an R1 stream, the stream leader, a replica catching up, the meta leader, a
    /// follower, in that order of weight) rather than any node.
    pub target_bias: f64,
    /// Chance that a scale, move or peer removal made during a fault period is followed at once by a
    /// fault on the stream leader, a replica catching up or the sole replica.
    pub align_probability: f64,
    /// The scaler flips between one replica and the most it may use, instead of drawing
    /// counts at random.
    pub flip_replicas: bool,
    /// Overrides `scale.wait_settled_probability` while this profile is in use (waiting for a
    /// change to settle under back-to-back faults holds the scaler until a quiet period).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_settled_probability: Option<f64>,
    /// Overrides `operator.weights` while this profile is in use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator_weights: Option<Weights>,
}

impl Default for Schedule {
    fn default() -> Self {
        Self {
            kinds: FaultKind::GENTLE.to_vec(),
            off_min: Duration::from_secs(30),
            off_max: Duration::from_secs(60),
            on_min: Duration::from_secs(30),
            on_max: Duration::from_secs(90),
            fault_min: Duration::from_secs(3),
            fault_max: Duration::from_secs(10),
            gap_min: Duration::from_millis(500),
            gap_max: Duration::from_secs(3),
            max_faulty: 0,
            majority: false,
            together: 0.0,
            target_bias: 0.5,
            align_probability: 0.25,
            flip_replicas: false,
            wait_settled_probability: None,
            operator_weights: None,
        }
    }
}

impl Schedule {
    /// Short fault-free stretches, long fault periods of back-to-back faults up to a
    /// minority, strikes aimed at whoever matters, and R1 <-> R(max) flips. Kills weigh
    /// three times as much as each other kind (a kind listed twice is drawn twice as
    /// often): losing a node's unsynced state mid-change is what old releases fail on.
    pub(super) fn aggressive() -> Self {
        use FaultKind::*;
        Self {
            kinds: vec![Kill, Kill, Kill, Restart, Pause, Isolate, Split],
            off_min: Duration::from_secs(5),
            off_max: Duration::from_secs(15),
            on_min: Duration::from_secs(60),
            on_max: Duration::from_secs(120),
            fault_min: Duration::from_secs(2),
            fault_max: Duration::from_secs(8),
            gap_min: Duration::from_secs(2),
            gap_max: Duration::from_secs(8),
            majority: true,
            together: 0.3,
            target_bias: 0.8,
            align_probability: 0.6,
            flip_replicas: true,
            wait_settled_probability: Some(0.1),
            // Replica flips and leader changes mid-flip: what old releases lose data on
            // (and the durable consumer's leader changing under its acks).
            operator_weights: Some(Weights { scale: 8, stream_stepdown: 2, consumer_stepdown: 1, ..Weights::none() }),
            ..Self::default()
        }
    }

    /// The gentle schedule with disk faults: corruption twice as often as a snapshot
    /// rollback, between kills and restarts (seed 002: what lost acknowledged writes and
    /// whole streams on 2.12.1).
    fn disk() -> Self {
        use FaultKind::*;
        Self { kinds: vec![Corrupt, Corrupt, SnapshotRollback, Kill, Restart, Pause], ..Self::default() }
    }

    /// The gentle schedule with power cuts on one node at a time, between kills and
    /// restarts: the nodes' stores go on the power-loss layer.
    fn power() -> Self {
        use FaultKind::*;
        Self { kinds: vec![PowerLoss, PowerLoss, Kill, Restart], ..Self::default() }
    }

    /// Power cuts on every node at once (opt in), and on one node at a time.
    fn power_all() -> Self {
        use FaultKind::*;
        Self { kinds: vec![PowerLossAll, PowerLoss, Kill], ..Self::default() }
    }

    /// The schedules every configuration has.
    pub fn built_in() -> BTreeMap<String, Schedule> {
        [("gentle", Schedule::default()), ("aggressive", Schedule::aggressive()), ("disk", Schedule::disk()), ("power", Schedule::power()), ("power-all", Schedule::power_all())]
            .into_iter()
            .map(|(name, s)| (name.to_string(), s))
            .collect()
    }
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    /// SIGKILL, restart on the same name, ports and data dir after the fault's duration.
    Kill,
    /// SIGSTOP, SIGCONT after the fault's duration.
    Pause,
    /// Graceful stop (SIGTERM or lame-duck mode), then start again.
    Restart,
    /// Cut a node's routes and client connections.
    Isolate,
    /// Cut the routes between a minority of nodes and the rest, and the minority's clients.
    Split,
    /// Add `latency` to every link of a node.
    Latency,
    /// Remove a stopped server from the meta group (`$JS.API.SERVER.REMOVE`), wipe its data
    /// and bring it back under a new name (local clusters with the system account; one at a
    /// time, only while the stream has settled at two replicas or more, so a majority of
    /// its copies is never wiped by the fault itself).
    Membership,
    /// Flip bits in, or truncate, one of the stream's files (a message block most often,
    /// else an index or a Raft file) on a stopped node, then start it again (same rules as
    /// membership: one at a time, another whole copy kept).
    Corrupt,
    /// Roll a stopped node's Raft snapshots (the meta layer's and the stream's) back to a
    /// copy taken at the start of an earlier fault period, then start it again.
    #[serde(rename = "snapshot-rollback")]
    SnapshotRollback,
    /// A power cut on one node: killed, every write it had not fsynced thrown away (the
    /// power-loss layer under its store), started again (the membership rule applies).
    #[serde(rename = "power-loss")]
    PowerLoss,
    /// A power cut on every node at once (opt in: without fsync on every write it may
    /// legitimately lose acknowledged messages); only when no other fault is in force.
    #[serde(rename = "power-loss-all")]
    PowerLossAll,
}

impl FaultsConfig {
    /// The schedule `profile` names: the file's, else a built-in one.
    pub fn schedule(&self) -> Option<Schedule> {
        self.profiles.get(&self.profile).cloned().or_else(|| Schedule::built_in().remove(&self.profile))
    }
}

impl Schedule {
    /// Nodes that may be faulty at once in a cluster of `n`.
    pub fn max_faulty(&self, n: usize) -> usize {
        match self.max_faulty {
            0 if self.majority => (n / 2 + 1).min(n.saturating_sub(1)).max(1),
            0 => ((n.saturating_sub(1)) / 2).max(1),
            m => m,
        }
    }
}

impl FaultKind {
    /// Whether the fault stops a server's process and starts it again (what it kept only
    /// in memory is gone): kill, restart, power cuts, and the faults that work on a stopped
    /// node (membership wipe, corruption, snapshot rollback).
    pub fn stops_the_process(self) -> bool {
        !matches!(self, Self::Pause | Self::Isolate | Self::Split | Self::Latency)
    }

    pub const ALL: [FaultKind; 11] = [
        Self::Kill,
        Self::Pause,
        Self::Restart,
        Self::Isolate,
        Self::Split,
        Self::Latency,
        Self::Membership,
        Self::Corrupt,
        Self::SnapshotRollback,
        Self::PowerLoss,
        Self::PowerLossAll,
    ];
    /// The gentle profile's: every kind but the disk faults (opt in: the `disk` profile).
    pub const GENTLE: [FaultKind; 7] = [Self::Kill, Self::Pause, Self::Restart, Self::Isolate, Self::Split, Self::Latency, Self::Membership];

    /// Faults that destroy a node's copy of the stream, in part or whole: one at a time,
    /// and only while another whole copy exists.
    pub fn destroys_data(self) -> bool {
        matches!(self, Self::Membership | Self::Corrupt | Self::SnapshotRollback | Self::PowerLoss)
    }

    /// The fewest replicas the stream must have settled at before this fault may destroy
    /// data. A damaged copy that keeps its server's identity (corruption, snapshots rolled
    /// back) is within what replication promises to survive only as a minority of its
    /// group, so three; a server wiped and back under a new name, or one that lost writes
    /// it never synced, rejoins as a follower and catches up, so two.
    pub fn min_replicas(self) -> usize {
        match self {
            Self::Corrupt | Self::SnapshotRollback => 3,
            _ => 2,
        }
    }

    /// Faults that need the power-loss layer under every node's store.
    pub fn cuts_power(self) -> bool {
        matches!(self, Self::PowerLoss | Self::PowerLossAll)
    }
}

impl Default for FaultsConfig {
    fn default() -> Self {
        Self { enabled: true, profile: "gentle".into(), latency: Duration::from_millis(200), profiles: Schedule::built_in() }
    }
}
