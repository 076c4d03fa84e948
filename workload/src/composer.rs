//! The Antithesis Test Composer commands (`workload composer ...`).
//!
//! They share one state directory (a named volume, see [`crate::records`]): each driver
//! records there which stream it used and how far its acknowledgements got; the
//! eventually_ and finally_ commands verify every recorded stream from that record alone.

use crate::config::Config;
use crate::drivers::monitor::judge_stream;
use crate::faults::QuietRequests;
use crate::records::{Record, StateDir};
use crate::sdk;
use crate::state::{ClusterAddr, Ctx};
use crate::verify::{self, first_contact, recovered};
use properties::payload::RunMessages;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// A context for verifying `r`'s stream.
fn record_ctx(cfg: &Config, cluster: &ClusterAddr, r: &Record, origin: Instant, quiet: &QuietRequests, cancel: CancellationToken) -> Ctx {
    let ctx = Ctx::new(cfg, cluster, RunMessages::new(&r.run_id, r.seed, r.payload_size), origin, quiet.clone(), cancel);
    ctx.stats.last_acked_seq.store(r.last_acked, Relaxed);
    ctx.stats.replicas.store(r.replicas, Relaxed);
    ctx
}

/// A context on no particular stream, for reaching the cluster.
fn probe_ctx(cfg: &Config, cluster: &ClusterAddr, origin: Instant, quiet: &QuietRequests, cancel: CancellationToken) -> Ctx {
    Ctx::new(cfg, cluster, RunMessages::new("probe", 0, 1), origin, quiet.clone(), cancel)
}

/// The container's long-lived command: a reachable, healthy cluster, `setup_complete`
/// once, then idle until stopped. An error when the cluster could not be reached.
pub async fn entrypoint(cfg: &Config, cluster: &ClusterAddr, stop: CancellationToken) -> Result<(), String> {
    let ctx = probe_ctx(cfg, cluster, Instant::now(), &QuietRequests::new(cfg.liveness.window), stop.clone());
    first_contact(&ctx).await?;
    sdk::setup_complete(&json!({ "servers": cluster.servers, "cluster_size": cluster.size }));
    tracing::info!("setup complete; idle until stopped");
    stop.cancelled().await;
    Ok(())
}

/// Verifies every recorded stream (eventually_ and finally_): a healthy cluster, each stream
/// there and covering its acks, settled where its driver finished, every acknowledged message
/// read back with its content, every replica equal to the leader. Returns one summary per
/// stream for the report.
pub async fn verify(cfg: &Config, cluster: &ClusterAddr, state: &StateDir, stop: CancellationToken) -> anyhow::Result<Vec<Value>> {
    let records = state.records()?;
    let (started, quiet) = (Instant::now(), QuietRequests::new(cfg.liveness.window));
    tracing::info!(streams = records.len(), "verifying every recorded stream");
    let probe = probe_ctx(cfg, cluster, started, &quiet, stop.child_token());
    if !recovered(&probe, &stop).await {
        for r in &records {
            verify::unanswered(&record_ctx(cfg, cluster, r, started, &quiet, stop.child_token()), "the cluster never became healthy");
        }
        return Ok(Vec::new());
    }
    let mut summaries = Vec::new();
    for r in records {
        if stop.is_cancelled() {
            break;
        }
        let ctx = Arc::new(record_ctx(cfg, cluster, &r, started, &quiet, stop.child_token()));
        let check = verify::final_verification(&ctx, r.finished).await;
        let open = r.open_suspicions.iter().map(|s| (*s, Value::Null)).collect::<BTreeMap<_, _>>();
        summaries.push(json!({
            "stream": ctx.stream,
            "driver_finished": r.finished,
            "check": check,
            "suspicions_left_by_driver": check.answer(open),
        }));
    }
    Ok(summaries)
}

/// anytime_: while faults go on, every finished driver's stream must still exist and hold
/// every acknowledged message (nobody watches it any more otherwise until finally_). Each
/// stream is looked at until its state is whole, or a bad state is confirmed over
/// `liveness.quiet`, or a liveness window passes without either (unknown); a stream
/// without a leader judges nothing.
pub async fn watch_at_rest(cfg: &Config, cluster: &ClusterAddr, state: &StateDir, stop: CancellationToken) -> anyhow::Result<Vec<Value>> {
    let records: Vec<Record> = state.records()?.into_iter().filter(|r| r.finished).collect();
    let (started, quiet) = (Instant::now(), QuietRequests::new(cfg.liveness.window));
    let probe = probe_ctx(cfg, cluster, started, &quiet, stop.child_token());
    // Connects in the background: an unreachable cluster makes each stream's look unknown.
    let client = probe.connect("anytime").await?;
    let mut summaries = Vec::new();
    for r in records {
        let ctx = record_ctx(cfg, cluster, &r, started, &quiet, stop.child_token());
        let outcome = judge_stream(&ctx, &client, r.last_acked, &stop).await;
        summaries.push(json!({ "stream": ctx.stream, "last_acked": r.last_acked, "stream_state": outcome }));
    }
    Ok(summaries)
}

