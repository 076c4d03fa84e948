//! Workload settings: built-in defaults < config file < environment < flags.
//!
//! `config/workload.toml` documents every setting with its default; a test checks that the
//! file and `Config::default()` agree. Validation runs once, before anything connects, and
//! names the offending field.

mod faults;
mod validate;

pub use faults::{FaultKind, FaultsConfig, Schedule};
pub use validate::ConfigError;

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
    /// Longest outage (no write acknowledged, nothing read while there was more, nothing
    /// delivered to the durable consumer while it was owed) an operation may cause while no
    /// fault is in force (`operation-outage-bounded`).
    #[serde(with = "humantime_serde")]
    pub outage_bound: Duration,
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
        Self { window: Duration::from_secs(120), quiet: Duration::from_secs(30), outage_bound: Duration::from_secs(10) }
    }
}

impl Default for ReportConfig {
    fn default() -> Self {
        Self { progress_interval: Duration::from_secs(10), metrics: None }
    }
}


impl Config {
    pub fn load(path: Option<&Path>) -> anyhow::Result<Config> {
        let Some(path) = path else { return Ok(Config::default()) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))
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
