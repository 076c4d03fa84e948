//! What the drivers share while a run goes on: a few numbers, nothing per message.

use crate::config::Config;
use crate::faults::log::FaultLog;
use crate::faults::QuietRequests;
use crate::context::retry::Liveness;
use crate::context::ops::OpTally;
use crate::nats::view::ClusterView;
use properties::payload::RunMessages;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Where the cluster is.
#[derive(Clone, Debug)]
pub struct ClusterAddr {
    pub servers: Vec<String>,
    /// Monitoring base URLs (http://host:port); empty when unknown (`run` without --monitor).
    pub monitor_urls: Vec<String>,
    pub size: usize,
}

/// Everything a driver needs: settings, the run's identity, shared numbers, the liveness
/// rule and the stop signal.
#[derive(Clone)]
pub struct Ctx {
    pub cfg: Config,
    pub run: RunMessages,
    pub stream: String,
    pub subject: String,
    pub cluster: ClusterAddr,
    pub live: Liveness,
    pub cancel: CancellationToken,
    /// The publisher has ended (after finishing): the last ack is final.
    pub published: CancellationToken,
    pub stats: Arc<Stats>,
    pub suspicions: Arc<Suspicions>,
    /// Who does what in the cluster (the monitor keeps it; the fault injector reads it).
    pub view: Arc<ClusterView>,
    /// The local injector's log, when one runs.
    pub faults: Option<Arc<FaultLog>>,
    /// What the operator did.
    pub ops: Arc<OpTally>,
    /// The durable consumer's ledger and floor judge, handed over when its driver stops
    /// (for the final verification).
    pub durable: Arc<Mutex<Option<properties::durable::Handover>>>,
    /// Acknowledged sequences a read confirmed gone (for the report's ok / lost / unknown).
    pub lost: Arc<Mutex<properties::ranges::Ranges>>,
}

/// The stream and subject of a run.
pub fn names(run_id: &str) -> (String, String) {
    (format!("WORKLOAD_{run_id}"), format!("workload.{run_id}"))
}

impl Ctx {
    /// The one way a context is made: the run `run` on its own stream, timed from `origin`,
    /// stopped by `cancel`, asking for quiet through `quiet`.
    pub fn new(cfg: &Config, cluster: &ClusterAddr, run: RunMessages, origin: Instant, quiet: QuietRequests, cancel: CancellationToken) -> Ctx {
        let (stream, subject) = names(&run.run_id);
        Ctx {
            live: Liveness::new(cfg.window(), origin, quiet),
            cfg: cfg.clone(),
            run,
            stream,
            subject,
            cluster: cluster.clone(),
            cancel,
            published: CancellationToken::new(),
            stats: Arc::default(),
            suspicions: Arc::default(),
            view: Arc::default(),
            faults: None,
            ops: Arc::default(),
            durable: Arc::default(),
            lost: Arc::default(),
        }
    }

    /// The same run with another stop signal (the drivers' one is cancelled when they
    /// stop; the final verification and the benchmark go on after that). `give_up`: stop
    /// retrying after one expired liveness window.
    pub fn with_cancel(&self, cancel: &CancellationToken, give_up: bool) -> Ctx {
        Ctx { cancel: cancel.clone(), live: self.live.giving_up(give_up), ..self.clone() }
    }

    /// Acknowledged sequences `from ..= to` were confirmed gone by a read.
    pub fn record_lost(&self, from: u64, to: u64) {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).insert_range(from, to);
    }

    /// API request timeout: long enough for a busy leader, short next to the window.
    pub fn api_timeout(&self) -> Duration {
        Duration::from_secs(5)
    }

    /// A connection of its own for one role; gives up only when the run is stopped.
    pub async fn connect(&self, role: &str) -> anyhow::Result<async_nats::Client> {
        let name = format!("workload-{}-{role}", self.run.run_id);
        tokio::select! {
            c = crate::nats::jsapi::connect(&self.cluster.servers, &name) => c,
            _ = self.cancel.cancelled() => anyhow::bail!("stopped before {role} could connect"),
        }
    }
}

/// A bad observation not yet confirmed or refuted, by what would answer it in the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Suspect {
    /// STREAM.INFO said "not found".
    StreamMissing,
    /// The stream's last sequence or count below the last ack.
    StreamShort,
    /// Acknowledged sequences purged, deleted or reported lost.
    AckedSequencesMissing,
    /// Publishes rejected: the stream ends before the last ack.
    PublishStreamBehind,
    /// A skipped sequence looked up and found absent, not yet for long enough.
    ReadMissing,
    /// A replica disagreeing with the leader.
    ReplicasDisagree,
    /// The durable consumer's ack floor disagreeing with its confirmed acks or deliveries.
    DurableAckFloor,
}

/// Suspicions still open, each with the details of its latest bad observation. Whatever is
/// open when the drivers stop is handed to the final verification, which answers it with
/// faults paused: nothing vanishes because the run ended first.
#[derive(Default)]
pub struct Suspicions(Mutex<BTreeMap<Suspect, Value>>);

impl Suspicions {
    pub fn open(&self, what: Suspect, details: &Value) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(what, details.clone());
        }
    }

    pub fn close(&self, what: Suspect) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(&what);
        }
    }

    /// What is open now.
    pub fn open_now(&self) -> Vec<Suspect> {
        self.0.lock().map(|m| m.keys().copied().collect()).unwrap_or_default()
    }

    /// Takes every open suspicion (they are answered elsewhere from now on).
    pub fn take(&self) -> BTreeMap<Suspect, Value> {
        self.0.lock().map(|mut m| std::mem::take(&mut *m)).unwrap_or_default()
    }
}

/// How many replaced ordered consumers [`Stats`] keeps: a read outage of a whole liveness
/// window holds about 16 replacements at the default bound (every 2.5 s).
pub const REPLACEMENTS_KEPT: usize = 64;

macro_rules! stats {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Run-wide counters, all atomics.
        #[derive(Default)]
        pub struct Stats {
            $( $(#[$doc])* pub $name: AtomicU64, )*
            /// Leader of the stream at the last look (for progress lines).
            pub leader: Mutex<String>,
            /// The publisher's first failure since its last clean ack, and its last failure
            /// (what a write outage met).
            pub first_publish_error: Mutex<String>,
            pub last_publish_error: Mutex<String>,
            /// The last ordered consumers the reader replaced for delivering nothing while
            /// behind, each with the state its server answered (a read outage's evidence).
            pub reader_replacements: Mutex<std::collections::VecDeque<Value>>,
        }
        impl Stats {
            /// Keeps a replaced ordered consumer's state, the last [`REPLACEMENTS_KEPT`] only.
            pub fn replaced_reader(&self, state: Value) {
                if let Ok(mut kept) = self.reader_replacements.lock() {
                    if kept.len() == REPLACEMENTS_KEPT {
                        kept.pop_front();
                    }
                    kept.push_back(state);
                }
            }

            /// The kept replacements at `from_s..=to_s` seconds of the run.
            pub fn replacements_between(&self, from_s: f64, to_s: f64) -> Vec<Value> {
                let kept = self.reader_replacements.lock().map(|k| k.clone()).unwrap_or_default();
                kept.into_iter().filter(|r| r["t_s"].as_f64().is_some_and(|t| t >= from_s && t <= to_s)).collect()
            }

            pub fn to_json(&self) -> Value {
                json!({ $( stringify!($name): self.$name.load(Relaxed), )* })
            }
        }
    };
}

stats! {
    /// Every sequence up to this one was acknowledged holding its own message (the loss
    /// checks' watermark; frozen at the first wrong ack).
    last_acked_seq,
    /// The message index whose ack first broke a property (0: none did).
    ack_diverged_at,
    /// Acks that arrived after a rewind gave their send up, judged as they came.
    late_acks,
    /// Acks judged in order (fresh and duplicate).
    acked,
    duplicate_acks,
    publish_failures,
    /// Times the publisher went back to its first unconfirmed message.
    rewinds,
    /// Retries rejected for a wrong last sequence although the stream held that very
    /// message: the leader's dedup state had not caught up yet.
    dedup_lagged,
    /// Of those, the stream held the retried message itself (id, checksum, payload) right
    /// after the last ack: taken as its ack, read instead of answered.
    acked_by_lookup,
    /// The highest message index sent (acknowledged or not).
    sent_high,
    /// Messages read and verified by the live consumer.
    verified,
    /// Messages verified by the final full read.
    final_verified,
    consumer_recreates,
    /// Ordered consumers made anew because they delivered nothing for half the outage
    /// bound while the stream held more (each logged with the old consumer's state).
    consumer_stuck_recreates,
    /// New ordered consumers whose server counted nothing pending although the stream held
    /// acknowledged messages past their start (placed on a peer still catching up), asked
    /// for again.
    reader_placed_behind,
    /// Deliveries of already verified sequences as a new consumer's first message (the
    /// client restarted a consumer from 1).
    redeliveries,
    /// Replica states compared with the leader's (per-replica check).
    replica_comparisons,
    scale_requests,
    /// Scale requests sent again because a late, older request had undone them.
    scale_reissued,
    scales_settled,
    settle_ms_max,
    settle_ms_total,
    /// Replica count last configured on the stream.
    replicas,
    liveness_windows_expired,
    /// The durable consumer: deliveries (redeliveries among them), acks the server
    /// confirmed or left unanswered, deliveries left unacknowledged on purpose, and times
    /// it was found gone and made anew.
    durable_delivered,
    durable_redelivered,
    durable_acks_confirmed,
    durable_acks_unconfirmed,
    /// Unanswered acks the server confirmed when sent again, and those dropped unanswered
    /// (more than the driver keeps).
    durable_acks_confirmed_again,
    durable_acks_unconfirmed_dropped,
    durable_acks_skipped,
    durable_recreated,
    /// Sequences the durable consumer's ack floor passed that the stream no longer held.
    durable_absent_passed,
    /// Confirmed acks undone while the durable consumer had a single replica (by design).
    durable_unreplicated_undone,
    /// Every sequence up to this one was delivered to the durable consumer (at its last look).
    durable_received,
    /// The highest sequence the durable consumer received (its outages are measured against
    /// it: a message it never received below it is at-least-once's question, not an outage).
    durable_received_high,
    /// Messages delivered again after their ack was confirmed (left unacknowledged to see
    /// whether they come yet again), and those that did not: a redelivery racing the ack;
    /// and copies that came again sooner than an ack wait could make them (still watched).
    durable_confirmed_redelivered,
    durable_redelivery_races,
    durable_redelivery_repeats,
    /// Resident set at the first progress line and the highest seen at any (KiB).
    rss_kib_first,
    rss_kib_max,
}

/// Counters that total to their largest value over several streams, not their sum.
const TOTAL_BY_MAX: [&str; 5] = ["settle_ms_max", "rss_kib_first", "rss_kib_max", "replicas", "ack_diverged_at"];

impl Stats {
    /// Acknowledged messages the live reader has not verified yet.
    pub fn lag(&self) -> u64 {
        Self::get(&self.last_acked_seq).saturating_sub(Self::get(&self.verified))
    }

    /// Every counter summed over `all` (the largest for those [`TOTAL_BY_MAX`] names).
    pub fn total<'a>(all: impl IntoIterator<Item = &'a Stats>) -> Value {
        let mut total = serde_json::Map::new();
        for stats in all {
            let Value::Object(counters) = stats.to_json() else { continue };
            for (name, v) in counters {
                let v = v.as_u64().unwrap_or(0);
                let t = total.entry(name.clone()).or_insert(json!(0));
                let sum = t.as_u64().unwrap_or(0);
                *t = json!(if TOTAL_BY_MAX.contains(&name.as_str()) { sum.max(v) } else { sum + v });
            }
        }
        Value::Object(total)
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_sum_counts_and_keep_the_largest_level() {
        let (a, b) = (Stats::default(), Stats::default());
        for (s, acked, settle, replicas) in [(&a, 10, 500, 3), (&b, 5, 900, 1)] {
            Stats::add(&s.acked, acked);
            s.settle_ms_max.store(settle, Relaxed);
            s.replicas.store(replicas, Relaxed);
        }
        let t = Stats::total([&a, &b]);
        assert_eq!((t["acked"].as_u64(), t["settle_ms_max"].as_u64(), t["replicas"].as_u64()), (Some(15), Some(900), Some(3)));
        assert_eq!(Stats::total([&a]), a.to_json(), "one stream's totals are its own counters");
    }
}
