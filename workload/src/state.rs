//! What the drivers share while a run goes on: a few numbers, nothing per message.

use crate::config::Config;
use crate::retry::Liveness;
use properties::payload::RunMessages;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Everything a driver needs: settings, the run's identity, shared numbers, the liveness
/// rule and the stop signal.
pub struct Ctx {
    pub cfg: Config,
    pub run: RunMessages,
    pub stream: String,
    pub subject: String,
    pub servers: Vec<String>,
    /// Full `/healthz` URLs base (http://host:port); empty when unknown (`run` without --monitor).
    pub monitor_urls: Vec<String>,
    pub cluster_size: usize,
    pub live: Liveness,
    pub cancel: CancellationToken,
    pub stats: std::sync::Arc<Stats>,
    /// The local injector's log, when one runs.
    pub faults: Option<std::sync::Arc<crate::faults::injector::FaultLog>>,
}

impl Ctx {
    /// The same run with another stop signal (the drivers' one is cancelled when they
    /// stop; the final verification and the benchmark go on after that). `give_up`: stop
    /// retrying after one expired liveness window.
    pub fn with_cancel(&self, cancel: &CancellationToken, give_up: bool) -> Ctx {
        Ctx {
            cfg: self.cfg.clone(),
            run: self.run.clone(),
            stream: self.stream.clone(),
            subject: self.subject.clone(),
            servers: self.servers.clone(),
            monitor_urls: self.monitor_urls.clone(),
            cluster_size: self.cluster_size,
            live: Liveness { give_up, ..self.live.clone() },
            cancel: cancel.clone(),
            stats: self.stats.clone(),
            faults: self.faults.clone(),
        }
    }

    /// API request timeout: long enough for a busy leader, short next to the window.
    pub fn api_timeout(&self) -> Duration {
        Duration::from_secs(5)
    }

    /// A connection of its own for one role; gives up only when the run is stopped.
    pub async fn connect(&self, role: &str) -> anyhow::Result<async_nats::Client> {
        let name = format!("workload-{}-{role}", self.run.run_id);
        tokio::select! {
            c = connect(&self.servers, &name) => c,
            _ = self.cancel.cancelled() => anyhow::bail!("stopped before {role} could connect"),
        }
    }
}

pub async fn connect(servers: &[String], name: &str) -> anyhow::Result<async_nats::Client> {
    let client = async_nats::ConnectOptions::new()
        .name(name)
        .retry_on_initial_connect()
        // Only the given addresses: the local cluster's proxies must not be bypassed.
        .ignore_discovered_servers()
        .connection_timeout(Duration::from_secs(5))
        .request_timeout(Some(Duration::from_secs(5)))
        .connect(servers.to_vec())
        .await?;
    Ok(client)
}

macro_rules! stats {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Run-wide counters, all atomics.
        #[derive(Default)]
        pub struct Stats {
            $( $(#[$doc])* pub $name: AtomicU64, )*
            /// Leader of the stream at the last look (for progress lines).
            pub leader: Mutex<String>,
        }
        impl Stats {
            pub fn to_json(&self) -> Value {
                json!({ $( stringify!($name): self.$name.load(Relaxed), )* })
            }
        }
    };
}

stats! {
    /// Sequence of the last acknowledged publish.
    last_acked_seq,
    /// Acks judged in order (fresh and duplicate).
    acked,
    duplicate_acks,
    publish_failures,
    /// Times the publisher went back to its first unconfirmed message.
    rewinds,
    /// Retries rejected for a wrong last sequence although the stream held that very
    /// message: the leader's dedup state had not caught up yet.
    dedup_lagged,
    /// Messages read and verified by the live consumer.
    verified,
    /// Messages verified by the final full read.
    final_verified,
    consumer_recreates,
    /// Deliveries of already verified sequences (the client restarted a consumer from 1).
    redeliveries,
    scale_requests,
    /// Scale requests sent again because a late, older request had undone them.
    scale_reissued,
    scales_settled,
    settle_ms_max,
    settle_ms_total,
    /// Replica count last configured on the stream.
    replicas,
    liveness_windows_expired,
    /// Resident set at the first progress line and the highest seen at any (KiB).
    rss_kib_first,
    rss_kib_max,
}

impl Stats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Relaxed)
    }
}
