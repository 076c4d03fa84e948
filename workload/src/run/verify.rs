//! Reaching a cluster, and the final verification of a stream with faults paused.
//!
//! First contact (a run's setup, the composer entrypoint) is not a liveness question: a
//! cluster that cannot be reached or made ready within a liveness window means the run
//! could not be carried out, and the error names the addresses and the last answer. Once a
//! cluster was reached, failing to get back to it is `cluster-eventually-healthy` failing.

use crate::history;
use crate::nats::monitor::{all_healthy, http_client, unhealthy};
use crate::drivers::monitor::{judge_replicas_at_rest, judge_stream};
use crate::drivers::{operator, reader};
use crate::faults::quiet::Why;
use crate::nats::jsapi;
use crate::sdk;
use crate::context::state::{Ctx, Stats, Suspect};
use properties::{Outcome, Property};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// First contact: within a liveness window each, a connection to the servers and every
/// node's full `/healthz`. The error says what could not be reached and why.
pub async fn first_contact(ctx: &Ctx) -> Result<async_nats::Client, String> {
    let servers = ctx.cluster.servers.join(",");
    let window = ctx.cfg.liveness.window;
    // Without retry_on_initial_connect a failed attempt says why (refused, no route, ...).
    let probe = || async {
        async_nats::ConnectOptions::new()
            .ignore_discovered_servers()
            .connection_timeout(ctx.api_timeout())
            .connect(ctx.cluster.servers.clone())
            .await
    };
    ctx.live
        .attempt("connect", &ctx.cancel, probe)
        .await
        .map_err(|e| format!("cannot reach the cluster at {servers} within {window:?}: {e}"))?;
    let http = http_client();
    let healthy = || async {
        let sick = unhealthy(&http, &ctx.cluster.monitor_urls).await;
        if sick.is_empty() { Ok(()) } else { Err(sick.join(", ")) }
    };
    ctx.live
        .attempt("cluster health", &ctx.cancel, healthy)
        .await
        .map_err(|e| format!("the nodes at {servers} were not all healthy within {window:?}: {e}"))?;
    ctx.connect("setup").await.map_err(|e| e.to_string())
}

/// Every known node answers `/healthz` with 200 again, within a liveness window (reported
/// as `cluster-eventually-healthy`).
pub async fn recovered(ctx: &Ctx, cancel: &CancellationToken) -> bool {
    let http = http_client();
    let check = || all_healthy(&http, &ctx.cluster.monitor_urls);
    ctx.live.retry("cluster health", Property::ClusterEventuallyHealthy, cancel, check).await.is_some()
}

/// What the final verification of one stream found.
#[derive(Clone, Debug, Serialize)]
pub struct FinalCheck {
    pub last_acked: u64,
    pub healthy: bool,
    /// The stream exists and covers every ack (and has none purged, deleted or lost).
    pub stream: Outcome,
    /// Every acknowledged message read back with its content.
    pub read: Outcome,
    pub verified: u64,
    /// The highest sequence the read got to (read back, or skipped as confirmed gone).
    pub read_up_to: u64,
    pub read_s: f64,
    pub read_per_s: f64,
    /// Every current replica equal to the leader; absent when no monitoring endpoints.
    pub replicas: Option<Outcome>,
    /// The durable consumer's ack floor agreeing with its acks; absent when none ran.
    pub durable: Option<Outcome>,
    /// What became of the messages owed to the durable consumer: reported late, passed by
    /// its ack floor (received later, or never). Per stream (none in a joined check).
    pub durable_owed: Option<properties::durable::Owed>,
}

/// The final verification of `ctx`'s stream could not be done at all: every safety
/// question it answers is unknown.
pub fn unanswered(ctx: &Ctx, why: &str) -> FinalCheck {
    let details = json!({ "stream": ctx.stream, "problem": format!("final verification: {why}") });
    for p in [Property::StreamNeverDisappears, Property::StreamStateCoversAcks, Property::AckedMessageNeverLost, Property::ReplicasAgree] {
        history::unknown(p, &details);
    }
    let mut check = FinalCheck::unknown(Stats::get(&ctx.stats.last_acked_seq));
    if ctx.durable.lock().unwrap_or_else(|p| p.into_inner()).take().is_some() {
        history::unknown(Property::DurableAckNeverUndone, &details);
        check.durable = Some(Outcome::Unknown);
    }
    check
}

impl FinalCheck {
    /// Every question held: the stream can be retired.
    pub fn all_held(&self) -> bool {
        self.stream == Outcome::Held && self.read == Outcome::Held && [self.replicas, self.durable].iter().all(|o| o.is_none_or(|r| r == Outcome::Held))
    }

    /// The final verification of several streams as one: every question's answers joined
    /// ([`Outcome::and`]), the counts summed, the read rate over the time all reads took.
    pub fn joined<'a>(checks: impl IntoIterator<Item = &'a FinalCheck>) -> Option<FinalCheck> {
        let and = |a: Option<Outcome>, b: Option<Outcome>| match (a, b) {
            (Some(a), Some(b)) => Some(a.and(b)),
            (a, b) => a.or(b),
        };
        checks.into_iter().cloned().reduce(|a, b| {
            let (verified, read_s) = (a.verified + b.verified, a.read_s.max(b.read_s));
            FinalCheck {
                last_acked: a.last_acked + b.last_acked,
                healthy: a.healthy && b.healthy,
                stream: a.stream.and(b.stream),
                read: a.read.and(b.read),
                verified,
                read_up_to: a.read_up_to + b.read_up_to,
                read_s,
                read_per_s: verified as f64 / read_s.max(1e-9),
                replicas: and(a.replicas, b.replicas),
                durable: and(a.durable, b.durable),
                durable_owed: None,
            }
        })
    }

    fn unknown(last_acked: u64) -> Self {
        let u = Outcome::Unknown;
        FinalCheck { last_acked, healthy: false, stream: u, read: u, verified: 0, read_up_to: 0, read_s: 0.0, read_per_s: 0.0, replicas: Some(u), durable: None, durable_owed: None }
    }

    /// The answer to a suspicion left open when the drivers stopped.
    fn answers(&self, what: Suspect) -> (&'static str, Outcome) {
        match what {
            Suspect::StreamMissing | Suspect::StreamShort | Suspect::AckedSequencesMissing | Suspect::PublishStreamBehind => {
                ("final stream state", self.stream)
            }
            Suspect::ReadMissing => ("final read", self.read),
            Suspect::ReplicasDisagree => ("final replica comparison", self.replicas.unwrap_or(Outcome::Unknown)),
            Suspect::DurableAckFloor => ("final durable consumer check", self.durable.unwrap_or(Outcome::Unknown)),
        }
    }

    /// Suspicions open when the drivers stopped, each with the final check that answered it.
    pub fn answer(&self, open: BTreeMap<Suspect, Value>) -> Vec<Value> {
        open.into_iter()
            .map(|(what, details)| {
                let (by, outcome) = self.answers(what);
                json!({ "what": what, "details": details, "answered_by": by, "answer": outcome })
            })
            .collect()
    }
}

/// With faults paused: the cluster heals, the stream still covers every ack, the last
/// requested replica count settles (when `settle`: nobody scales it any more), a full read
/// verifies 1 ..= last ack, and every replica equals the leader. Every question ends held,
/// failed or unknown; an unknown is reported as such, never as held. `ask_quiet`: pause
/// faults for it (not for a composer driver's own check while other drivers run).
pub async fn final_verification(ctx: &Arc<Ctx>, settle: bool, ask_quiet: bool) -> FinalCheck {
    let cancel = CancellationToken::new();
    let last_acked = Stats::get(&ctx.stats.last_acked_seq);
    tracing::info!(last_acked, "final verification");
    if ask_quiet {
        ctx.live.quiet.request(Why::FinalVerification, ctx.cfg.liveness.window, "final verification");
    }
    let ctx = ctx.with_cancel(&cancel, true);
    if !recovered(&ctx, &cancel).await {
        return unanswered(&ctx, "the cluster never became healthy");
    }
    let Ok(client) = ctx.connect("final").await else { return unanswered(&ctx, "no connection") };
    let stream = judge_stream(&ctx, &client, last_acked, &cancel, &|| true).await.unwrap_or(Outcome::Unknown);
    let mut check = FinalCheck { healthy: true, stream, ..FinalCheck::unknown(last_acked) };
    if check.stream == Outcome::Failed && stream_gone(&ctx, &client).await {
        sdk::check!(Property::AckedMessageNeverLost, false, &json!({ "stream": ctx.stream, "last_acked_seq": last_acked,
            "observed_by": "final verification: the stream no longer exists, so no acknowledged message can be read back" }));
        ctx.record_lost(1, last_acked);
        check.read = Outcome::Failed;
        check.replicas = None;
        return check;
    }
    if settle && ctx.cfg.operator.enabled && ctx.cluster.size > 1 {
        let replicas = Stats::get(&ctx.stats.replicas) as usize;
        operator::scale::wait_settled(&ctx, &client, replicas).await;
    }
    let started = Instant::now();
    let next = reader::read(&ctx, reader::Until::Seq(last_acked), &ctx.stats.final_verified).await.unwrap_or(0);
    check.verified = Stats::get(&ctx.stats.final_verified);
    check.read_up_to = next.saturating_sub(1);
    check.read_s = started.elapsed().as_secs_f64();
    check.read_per_s = check.verified as f64 / check.read_s.max(1e-9);
    check.read = if next <= last_acked {
        history::unknown(Property::AckedMessageNeverLost, &json!({ "stream": ctx.stream, "last_acked_seq": last_acked, "read_up_to": next.saturating_sub(1),
            "problem": "the final read could not reach the last ack within a liveness window without progress" }));
        Outcome::Unknown
    } else if check.verified >= last_acked {
        sdk::hold!(Property::AckedMessageNeverLost); // every ack read back, verified
        Outcome::Held
    } else {
        Outcome::Failed // the missing ones were judged (and reported) as they were skipped
    };
    check.replicas = judge_replicas_at_rest(&ctx, &client, &cancel).await;
    (check.durable, check.durable_owed) = crate::drivers::durable::final_check(&ctx, &client).await.unzip();
    tracing::info!(?check, "final verification done");
    check
}

/// Deletes a finished stream within a liveness window of its own (the drivers' stop
/// signal is given by then); `held` says whether its final verification held everywhere
/// (the log says so). A failure is logged, not judged; returns whether it was deleted.
pub async fn delete_stream(ctx: &Ctx, held: bool) -> bool {
    let done = if held { "verified in full and deleted" } else { "a check failed: the nodes' state was saved and the stream deleted" };
    delete_named(ctx, &ctx.stream, done).await
}

/// [`delete_stream`] for the stream named `stream` (another driver's, retired by this one,
/// or one an operator command made for itself); `done` is the log line once deleted.
pub async fn delete_named(ctx: &Ctx, stream: &str, done: &str) -> bool {
    let ctx = ctx.with_cancel(&CancellationToken::new(), true);
    let Ok(client) = ctx.connect("retire").await else { return false };
    let api = format!("STREAM.DELETE.{stream}");
    let delete = || jsapi::request(&client, &api, &Value::Null, ctx.api_timeout());
    match ctx.live.attempt("delete stream", &ctx.cancel, delete).await {
        Ok(_) => {
            tracing::info!(%stream, "{done}");
            true
        }
        Err(e) => {
            tracing::warn!(%stream, "the stream could not be deleted: {e}");
            false
        }
    }
}

/// Every node's view of JetStream (`/jsz` with streams, consumers and Raft groups) and its
/// `/healthz`, saved in `dir` as `node-<i>.json` for a post-mortem; returns `dir` when
/// anything was saved. A node that does not answer is saved with its error.
pub async fn save_node_state(monitor_urls: &[String], dir: &std::path::Path) -> Option<std::path::PathBuf> {
    if monitor_urls.is_empty() || std::fs::create_dir_all(dir).is_err() {
        return None;
    }
    let http = http_client();
    for (i, url) in monitor_urls.iter().enumerate() {
        let get = |path: &str| {
            let http = http.clone();
            let url = format!("{url}{path}");
            async move { crate::nats::monitor::get_json(&http, &url).await.unwrap_or_else(|e| json!({ "error": e })) }
        };
        let jsz = get("/jsz?accounts=true&streams=true&consumers=true&config=true&raft=true").await;
        let healthz = get("/healthz").await;
        let state = json!({ "url": url, "jsz": jsz, "healthz": healthz });
        if let Err(e) = std::fs::write(dir.join(format!("node-{}.json", i + 1)), serde_json::to_vec_pretty(&state).unwrap_or_default()) {
            tracing::warn!("cannot save the nodes' state in {}: {e}", dir.display());
            return None;
        }
    }
    Some(dir.to_path_buf())
}

/// Whether STREAM.INFO says the stream does not exist (now, after a confirmed report).
async fn stream_gone(ctx: &Ctx, client: &async_nats::Client) -> bool {
    matches!(jsapi::stream_info(client, &ctx.stream, ctx.api_timeout()).await, Err(e) if e.err_code() == Some(jsapi::STREAM_NOT_FOUND))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(read: Outcome, verified: u64, read_s: f64, durable: Option<Outcome>) -> FinalCheck {
        let h = Outcome::Held;
        FinalCheck { last_acked: verified, healthy: true, stream: h, read, verified, read_up_to: verified, read_s, read_per_s: 0.0, replicas: Some(h), durable, durable_owed: None }
    }

    #[test]
    fn joined_checks_fail_where_one_failed_and_count_every_stream() {
        let all = [check(Outcome::Held, 100, 1.0, None), check(Outcome::Failed, 50, 2.0, Some(Outcome::Unknown))];
        let j = FinalCheck::joined(&all).unwrap();
        assert_eq!((j.read, j.stream, j.durable, j.replicas), (Outcome::Failed, Outcome::Held, Some(Outcome::Unknown), Some(Outcome::Held)));
        assert_eq!((j.verified, j.last_acked, j.read_per_s), (150, 150, 75.0), "the reads ran at once: 150 in 2 s");
        assert!(!j.all_held());
        assert!(FinalCheck::joined(&[]).is_none());
    }
}
