//! Workload settings: built-in defaults < config file < environment < flags.
//!
//! `config/workload.toml` documents every setting with its default; a test checks that the
//! file and `Config::default()` agree. Validation runs once, before anything connects, and
//! names the offending field.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The most streams one run drives (each holds a few connections and tasks).
pub const MAX_STREAMS: usize = 64;

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub stream: StreamConfig,
    pub publish: PublishConfig,
    pub operator: OperatorConfig,
    pub scale: ScaleConfig,
    pub liveness: LivenessConfig,
    pub durable: DurableConfig,
    pub faults: FaultsConfig,
    pub composer: ComposerConfig,
    pub report: ReportConfig,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// Independent streams in one run (`workload local` and `run`), each with its own
    /// publisher, readers and operator.
    pub count: usize,
    /// Replica count the stream is created with (capped at the cluster size).
    pub initial_replicas: usize,
    /// JetStream dedup window; must outlast any retry (at least twice the liveness window).
    #[serde(with = "humantime_serde")]
    pub duplicate_window: Duration,
    /// The servers' `sync_interval` (`workload local`; other clusters have their own configs):
    /// `always` fsyncs every write, `default` leaves the server's own interval.
    pub sync_interval: SyncInterval,
    /// A stream is finished, verified in full with faults paused, deleted and replaced by a
    /// fresh one (an epoch) once it has been driven this long (0: never)...
    #[serde(with = "humantime_serde")]
    pub rotate_after: Duration,
    /// ... or once this many messages were acknowledged on it (0: never), so that no copy
    /// a scale, move or evacuation makes grows with the length of the run.
    pub rotate_messages: u64,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SyncInterval {
    Always,
    Default,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PublishConfig {
    /// Payload bytes per message.
    pub payload_size: usize,
    /// Publishes awaiting their ack at once (1 = one at a time).
    pub in_flight: usize,
    /// Send `Nats-Expected-Last-Sequence` with every publish (needed when in_flight > 1).
    pub expected_last_sequence: bool,
    /// How long one publish waits for its ack.
    #[serde(with = "humantime_serde")]
    pub ack_timeout: Duration,
}

/// The operator: every interval it performs one operation on the stream, drawn by weight
/// among those the server supports.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OperatorConfig {
    pub enabled: bool,
    /// Pause between two operations, drawn from [interval_min, interval_max].
    #[serde(with = "humantime_serde")]
    pub interval_min: Duration,
    #[serde(with = "humantime_serde")]
    pub interval_max: Duration,
    /// Relative weight of each operation; 0 never draws it.
    pub weights: Weights,
    /// Chance that a move is cancelled right after it was requested (2.15).
    pub cancel_move_probability: f64,
    /// Chance that the operator waits for a move, peer removal or stepdown to settle
    /// before the next operation (scales have `scale.wait_settled_probability`).
    pub wait_settled_probability: f64,
    /// System account user and password, for meta leader stepdowns; empty: none drawn.
    /// `workload local` configures its cluster with its own and sets them.
    pub system_user: String,
    pub system_password: String,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Weights {
    pub scale: u32,
    pub r#move: u32,
    pub peer_remove: u32,
    pub peer_evacuate: u32,
    pub stream_stepdown: u32,
    pub meta_stepdown: u32,
    pub consumer_stepdown: u32,
    pub consumer_scale: u32,
    pub consumer_peer_remove: u32,
    pub consumer_peer_evacuate: u32,
    pub server_evacuate: u32,
}

impl OperatorConfig {
    /// The system account's user and password, when configured.
    pub fn system_account(&self) -> Option<(&str, &str)> {
        (!self.system_user.is_empty()).then_some((self.system_user.as_str(), self.system_password.as_str()))
    }
}

impl Weights {
    /// Every weight 0.
    pub fn none() -> Self {
        Weights { scale: 0, r#move: 0, peer_remove: 0, peer_evacuate: 0, stream_stepdown: 0, meta_stepdown: 0, consumer_stepdown: 0, consumer_scale: 0, consumer_peer_remove: 0, consumer_peer_evacuate: 0, server_evacuate: 0 }
    }

    /// These weights with every operation `keep` does not select at 0.
    pub fn only(&self, keep: impl Fn(properties::operations::OpKind) -> bool) -> Weights {
        use properties::operations::OpKind::*;
        let w = |op, weight| if keep(op) { weight } else { 0 };
        Weights {
            scale: w(Scale, self.scale),
            r#move: w(Move, self.r#move),
            peer_remove: w(PeerRemove, self.peer_remove),
            peer_evacuate: w(PeerEvacuate, self.peer_evacuate),
            stream_stepdown: w(StreamStepdown, self.stream_stepdown),
            meta_stepdown: w(MetaStepdown, self.meta_stepdown),
            consumer_stepdown: w(ConsumerStepdown, self.consumer_stepdown),
            consumer_scale: w(ConsumerScale, self.consumer_scale),
            consumer_peer_remove: w(ConsumerPeerRemove, self.consumer_peer_remove),
            consumer_peer_evacuate: w(ConsumerPeerEvacuate, self.consumer_peer_evacuate),
            server_evacuate: w(ServerEvacuate, self.server_evacuate),
        }
    }

    pub fn of(&self, op: properties::operations::OpKind) -> u32 {
        use properties::operations::OpKind::*;
        match op {
            Scale => self.scale,
            Move => self.r#move,
            PeerRemove => self.peer_remove,
            PeerEvacuate => self.peer_evacuate,
            StreamStepdown => self.stream_stepdown,
            MetaStepdown => self.meta_stepdown,
            ConsumerStepdown => self.consumer_stepdown,
            ConsumerScale => self.consumer_scale,
            ConsumerPeerRemove => self.consumer_peer_remove,
            ConsumerPeerEvacuate => self.consumer_peer_evacuate,
            ServerEvacuate => self.server_evacuate,
            CancelMove => 0, // follows a move, by cancel_move_probability
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ScaleConfig {
    /// Replica counts to pick from; empty means 1 ..= min(5, cluster size).
    pub replicas: Vec<usize>,
    /// Chance that a second, different count is requested right after the first.
    pub back_to_back_probability: f64,
    /// Chance that the scaler waits for a change to settle before the next one.
    pub wait_settled_probability: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LivenessConfig {
    /// Longest an operation may keep failing before it fails its liveness property.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// Fault-free tail of every window: faults are asked to pause this long.
    #[serde(with = "humantime_serde")]
    pub quiet: Duration,
}

/// Every duration the workload derives from the liveness settings, named for its use, so
/// no caller multiplies the window on its own.
impl LivenessConfig {
    /// How long a bad observation must persist, with faults asked to pause, before it is
    /// confirmed (a failure) rather than a passing glitch.
    pub fn confirm_hold(&self) -> Duration {
        self.quiet
    }

    /// A replica change slower than this counts as slow (`scale-settled-slowly`).
    pub fn slow_settle(&self) -> Duration {
        self.window / 2
    }

    /// How long a dropped peer or an unreplicated stretch still counts as recent.
    pub fn recent(&self) -> Duration {
        self.window
    }

    /// How long a request that drops a peer holds its turn when no look at the stream ever
    /// shows it carried out.
    pub fn drop_turn(&self) -> Duration {
        2 * self.window
    }
}

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
    fn aggressive() -> Self {
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

/// The durable consumer read beside the ordered reader: an explicitly acknowledged pull
/// consumer whose acks the server confirms.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DurableConfig {
    pub enabled: bool,
    /// Its replica count, drawn per run from these: 0 follows the stream's (and its scaling).
    pub replicas: Vec<usize>,
    /// How long a delivery waits for its ack before the server delivers it again.
    #[serde(with = "humantime_serde")]
    pub ack_wait: Duration,
    /// Deliveries left unacknowledged on purpose, so redelivery is exercised.
    pub skip_ack_probability: f64,
    /// Acks of deliveries awaiting their confirmation at once (resends of unanswered acks may
    /// take as many again).
    pub acks_in_flight: usize,
}

impl Default for DurableConfig {
    fn default() -> Self {
        Self { enabled: true, replicas: vec![0, 1], ack_wait: Duration::from_secs(5), skip_ack_probability: 0.001, acks_in_flight: 64 }
    }
}

/// The Antithesis Test Composer commands (`workload composer ...`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ComposerConfig {
    /// A driver without --duration runs for a random time in [driver_min, driver_max].
    #[serde(with = "humantime_serde")]
    pub driver_min: Duration,
    #[serde(with = "humantime_serde")]
    pub driver_max: Duration,
    /// A driver draws its payload size from these (unless --payload-size is given).
    pub payload_sizes: Vec<usize>,
    /// A driver draws its publishes in flight from these (unless --in-flight is given).
    pub in_flight: Vec<usize>,
    /// A driver draws the replica count it creates its stream with from these; empty
    /// means 1 ..= min(3, cluster size).
    pub initial_replicas: Vec<usize>,
    /// A finished driver verifies its whole stream and, when everything held, retires the
    /// verified streams beyond the newest `keep_verified` (deletes them; the records stay):
    /// the verifying commands' work does not grow with the timeline.
    pub retire_verified: bool,
    /// How many fully verified streams stay in the cluster, newest first, for anytime_,
    /// eventually_ and finally_ to judge again after later faults.
    pub keep_verified: usize,
}

impl Default for ComposerConfig {
    fn default() -> Self {
        Self {
            driver_min: Duration::from_secs(10),
            driver_max: Duration::from_secs(120),
            payload_sizes: vec![16, 128, 1024, 8192],
            in_flight: vec![1, 16, 64, 256],
            initial_replicas: Vec::new(),
            retire_verified: true,
            keep_verified: 2,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ReportConfig {
    /// Interval between progress lines.
    #[serde(with = "humantime_serde")]
    pub progress_interval: Duration,
    /// Serve Prometheus metrics at http://ADDR/metrics while the run goes on (none: off).
    pub metrics: Option<std::net::SocketAddr>,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            count: 1,
            initial_replicas: 3,
            duplicate_window: Duration::from_secs(300),
            sync_interval: SyncInterval::Always,
            rotate_after: Duration::from_secs(30 * 60),
            rotate_messages: 1_000_000,
        }
    }
}

impl Default for PublishConfig {
    fn default() -> Self {
        Self { payload_size: 128, in_flight: 16, expected_last_sequence: true, ack_timeout: Duration::from_secs(5) }
    }
}

impl Default for OperatorConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_min: Duration::from_secs(1),
            interval_max: Duration::from_secs(5),
            weights: Weights::default(),
            cancel_move_probability: 0.2,
            wait_settled_probability: 0.5,
            system_user: String::new(),
            system_password: String::new(),
        }
    }
}

impl Default for Weights {
    fn default() -> Self {
        Self { scale: 6, r#move: 2, peer_remove: 1, peer_evacuate: 1, stream_stepdown: 1, meta_stepdown: 1, consumer_stepdown: 1, consumer_scale: 1, consumer_peer_remove: 1, consumer_peer_evacuate: 1, server_evacuate: 1 }
    }
}

impl Default for ScaleConfig {
    fn default() -> Self {
        Self {
            replicas: Vec::new(),
            back_to_back_probability: 0.2,
            wait_settled_probability: 0.5,
        }
    }
}

impl Default for LivenessConfig {
    fn default() -> Self {
        Self { window: Duration::from_secs(120), quiet: Duration::from_secs(30) }
    }
}

impl Default for ReportConfig {
    fn default() -> Self {
        Self { progress_interval: Duration::from_secs(10), metrics: None }
    }
}


/// A setting that cannot work, named by its path in the config file.
#[derive(Debug, thiserror::Error)]
#[error("invalid config: {field}: {reason}")]
pub struct ConfigError {
    pub field: String,
    pub reason: String,
}

fn bad(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError { field: field.into(), reason: reason.into() }
}

impl Config {
    pub fn load(path: Option<&Path>) -> anyhow::Result<Config> {
        let Some(path) = path else { return Ok(Config::default()) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))
    }

    /// Checks every setting; `cluster_size` is known for local runs, not before connecting.
    pub fn validate(&self, cluster_size: Option<usize>) -> Result<(), ConfigError> {
        let p = &self.publish;
        if p.payload_size == 0 || p.payload_size > 1024 * 1024 {
            return Err(bad("publish.payload_size", "must be 1 ..= 1048576 bytes"));
        }
        if p.in_flight == 0 || p.in_flight > 4096 {
            return Err(bad("publish.in_flight", "must be 1 ..= 4096"));
        }
        if p.in_flight > 1 && !p.expected_last_sequence {
            return Err(bad("publish.expected_last_sequence", "must be true when publish.in_flight > 1, or a rewind could reorder the stream"));
        }
        if p.ack_timeout < Duration::from_millis(100) {
            return Err(bad("publish.ack_timeout", "must be at least 100ms"));
        }
        let l = &self.liveness;
        if l.window < Duration::from_secs(1) {
            return Err(bad("liveness.window", "must be at least 1s"));
        }
        if l.quiet.is_zero() || l.quiet >= l.window {
            return Err(bad("liveness.quiet", "must be more than 0 and less than liveness.window"));
        }
        if self.stream.duplicate_window < l.window * 2 {
            return Err(bad("stream.duplicate_window", "must be at least twice liveness.window, or a retry could be stored twice"));
        }
        let d = &self.durable;
        if d.enabled {
            if d.replicas.is_empty() || d.replicas.iter().any(|r| *r > 5) {
                return Err(bad("durable.replicas", "must list counts in 0 ..= 5 (0: the stream's)"));
            }
            if d.ack_wait < Duration::from_secs(1) {
                return Err(bad("durable.ack_wait", "must be at least 1s"));
            }
            if !(0.0..=0.5).contains(&d.skip_ack_probability) {
                return Err(bad("durable.skip_ack_probability", "must be in 0 ..= 0.5"));
            }
            if d.acks_in_flight == 0 {
                return Err(bad("durable.acks_in_flight", "must be at least 1"));
            }
        }
        let max = cluster_size.map_or(5, |n| n.min(5));
        let s = &self.stream;
        if s.initial_replicas == 0 || s.initial_replicas > 5 {
            return Err(bad("stream.initial_replicas", "must be 1 ..= 5"));
        }
        if s.count == 0 || s.count > MAX_STREAMS {
            return Err(bad("stream.count", format!("must be 1 ..= {MAX_STREAMS}")));
        }
        let c = &self.scale;
        if let Some(r) = c.replicas.iter().find(|r| **r == 0 || **r > max) {
            return Err(bad("scale.replicas", format!("{r} is outside 1 ..= {max}")));
        }
        let o = &self.operator;
        if o.interval_min > o.interval_max {
            return Err(bad("operator.interval_min", "must not exceed operator.interval_max"));
        }
        for (field, v) in [
            ("scale.back_to_back_probability", c.back_to_back_probability),
            ("scale.wait_settled_probability", c.wait_settled_probability),
            ("operator.cancel_move_probability", o.cancel_move_probability),
            ("operator.wait_settled_probability", o.wait_settled_probability),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(bad(field, "must be within 0 ..= 1"));
            }
        }
        let cm = &self.composer;
        if cm.driver_min > cm.driver_max {
            return Err(bad("composer.driver_min", "must not exceed composer.driver_max"));
        }
        if cm.payload_sizes.is_empty() || cm.payload_sizes.iter().any(|s| *s == 0 || *s > 1024 * 1024) {
            return Err(bad("composer.payload_sizes", "must name sizes within 1 ..= 1048576"));
        }
        if cm.in_flight.is_empty() || cm.in_flight.iter().any(|n| *n == 0 || *n > 4096) {
            return Err(bad("composer.in_flight", "must name depths within 1 ..= 4096"));
        }
        if let Some(r) = cm.initial_replicas.iter().find(|r| **r == 0 || **r > max) {
            return Err(bad("composer.initial_replicas", format!("{r} is outside 1 ..= {max}")));
        }
        if self.faults.schedule().is_none() {
            let known: Vec<String> = self.profiles().into_keys().collect();
            return Err(bad("faults.profile", format!("no profile named {:?} (known: {})", self.faults.profile, known.join(", "))));
        }
        for (name, f) in &self.faults.profiles {
            let field = |k: &str| format!("faults.profiles.{name}.{k}");
            for (k, lo, hi) in [("off_min", f.off_min, f.off_max), ("on_min", f.on_min, f.on_max), ("fault_min", f.fault_min, f.fault_max), ("gap_min", f.gap_min, f.gap_max)] {
                if lo > hi {
                    return Err(bad(field(k), "must not exceed its _max"));
                }
            }
            if f.kinds.is_empty() {
                return Err(bad(field("kinds"), "must name at least one fault type"));
            }
            if f.fault_min.is_zero() {
                return Err(bad(field("fault_min"), "must be more than 0"));
            }
            let wait = f.wait_settled_probability.unwrap_or(0.0);
            for (k, v) in [("target_bias", f.target_bias), ("align_probability", f.align_probability), ("together", f.together), ("wait_settled_probability", wait)] {
                if !(0.0..=1.0).contains(&v) {
                    return Err(bad(field(k), "must be within 0 ..= 1"));
                }
            }
            if let Some(n) = cluster_size {
                if f.max_faulty >= n && self.faults.enabled {
                    return Err(bad(field("max_faulty"), format!("must be below the cluster size {n}")));
                }
            }
        }
        if self.report.progress_interval.is_zero() {
            return Err(bad("report.progress_interval", "must be more than 0"));
        }
        Ok(())
    }

    /// The replica counts the scaler picks from for a cluster of `cluster_size` nodes.
    pub fn scale_choices(&self, cluster_size: usize) -> Vec<usize> {
        if self.scale.replicas.is_empty() {
            (1..=cluster_size.clamp(1, 5)).collect()
        } else {
            self.scale.replicas.clone()
        }
    }

    /// Every schedule a profile name can pick: the built-in ones, and the file's.
    fn profiles(&self) -> BTreeMap<String, Schedule> {
        let mut all = Schedule::built_in();
        all.extend(self.faults.profiles.clone());
        all
    }

    /// The schedule `faults.profile` names (validated to exist).
    pub fn schedule(&self) -> Schedule {
        self.faults.schedule().unwrap_or_default()
    }

    /// The operator's weights: the fault profile's, if it sets them.
    pub fn operator_weights(&self) -> Weights {
        self.schedule().operator_weights.unwrap_or_else(|| self.operator.weights.clone())
    }

    /// Keeps only the operations `keep` selects, wherever the weights in use come from.
    pub fn keep_operations(&mut self, keep: impl Fn(properties::operations::OpKind) -> bool) {
        let weights = self.operator_weights().only(keep);
        if let Some(mut schedule) = self.faults.schedule().filter(|s| s.operator_weights.is_some()) {
            schedule.operator_weights = Some(weights.clone());
            self.faults.profiles.insert(self.faults.profile.clone(), schedule);
        }
        self.operator.weights = weights;
    }

    pub fn window(&self) -> properties::liveness::WindowConfig {
        properties::liveness::WindowConfig {
            window: self.liveness.window,
            quiet: self.liveness.quiet,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_file_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/workload.toml");
        assert_eq!(Config::load(Some(&path)).unwrap(), Config::default());
        Config::default().validate(Some(3)).unwrap();
    }

    #[test]
    fn a_majority_profile_lets_all_but_a_minority_fail() {
        let gentle = Schedule::default();
        let aggressive = Schedule::aggressive();
        let counts = |s: &Schedule| [1, 3, 5, 7].map(|n| s.max_faulty(n));
        assert_eq!(counts(&gentle), [1, 1, 2, 3], "a minority, at least one");
        assert_eq!(counts(&aggressive), [1, 2, 3, 4], "a bare majority, never every node");
        assert_eq!(Schedule { max_faulty: 1, ..aggressive }.max_faulty(5), 1, "an explicit count wins");
    }

    #[test]
    fn invalid_values_name_their_field() {
        let mut c = Config::default();
        c.liveness.quiet = c.liveness.window;
        assert_eq!(c.validate(None).unwrap_err().field, "liveness.quiet");
        let mut c = Config::default();
        c.scale.replicas = vec![1, 4];
        assert_eq!(c.validate(Some(3)).unwrap_err().field, "scale.replicas");
        let mut c = Config::default();
        c.stream.duplicate_window = Duration::from_secs(60);
        assert_eq!(c.validate(None).unwrap_err().field, "stream.duplicate_window");
        assert!(toml::from_str::<Config>("[publish]\npayload = 3").is_err(), "unknown fields are refused");
        let mut c = Config::default();
        c.faults.profile = "wild".into();
        assert_eq!(c.validate(None).unwrap_err().field, "faults.profile");
    }

    #[test]
    fn a_file_adds_profiles_and_the_built_in_ones_stay() {
        let c: Config = toml::from_str("[faults]\nprofile = \"mine\"\n[faults.profiles.mine]\noff_min = \"1s\"\noff_max = \"2s\"\n").unwrap();
        c.validate(Some(3)).unwrap();
        let mine = c.schedule();
        assert_eq!(mine.off_max, Duration::from_secs(2));
        assert_eq!(mine.kinds, FaultKind::GENTLE.to_vec(), "unset fields take the gentle profile's values");
        let aggressive = Config { faults: FaultsConfig { profile: "aggressive".into(), ..c.faults.clone() }, ..c.clone() };
        assert!(aggressive.schedule().flip_replicas, "built-in profiles stay available");
        let bad: Config = toml::from_str("[faults.profiles.x]\nfault_min = \"9s\"\nfault_max = \"1s\"\n").unwrap();
        assert_eq!(bad.validate(None).unwrap_err().field, "faults.profiles.x.fault_min");
    }
}
