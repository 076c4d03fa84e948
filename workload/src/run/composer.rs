//! The Antithesis Test Composer commands (`workload composer ...`).
//!
//! They share one state directory (a named volume, see [`crate::run::records`]): each driver
//! records there which stream it used and how far its acknowledgements got; the
//! eventually_ and finally_ commands verify every recorded stream from that record alone.

use crate::config::Config;
use crate::drivers::monitor::judge_stream;
use crate::faults::QuietRequests;
use crate::nats::jsapi;
use crate::random::Source;
use crate::run::records::{Record, StateDir};
use crate::sdk;
use crate::context::state::{names, ClusterAddr, Ctx};
use crate::run::verify::{self, first_contact, recovered};
use properties::operations::OpKind;
use properties::payload::RunMessages;
use rand::Rng;
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

/// The records on the volume; each unreadable one is reported (`driver-record-unreadable`)
/// and skipped, so the others are still verified.
fn readable_records(state: &StateDir) -> anyhow::Result<Vec<Record>> {
    let (records, bad) = state.records()?;
    for b in bad {
        sdk::check!(Property::DriverRecordUnreadable, true, &json!({ "file": b.file, "error": b.error }));
    }
    Ok(records)
}

/// Verifies every recorded stream (eventually_ and finally_; Antithesis has stopped every
/// other command first): a healthy cluster, each stream there and covering its acks,
/// settled where its driver finished, every acknowledged message read back with its
/// content, every replica equal to the leader. A stream its driver retired was verified in
/// full already and is gone. Returns one summary per stream for the report.
pub async fn verify(cfg: &Config, cluster: &ClusterAddr, state: &StateDir, stop: CancellationToken) -> anyhow::Result<Vec<Value>> {
    let records = readable_records(state)?;
    let (started, quiet) = (Instant::now(), QuietRequests::new(cfg.liveness.window));
    tracing::info!(streams = records.len(), "verifying every recorded stream");
    let probe = probe_ctx(cfg, cluster, started, &quiet, stop.child_token());
    if !recovered(&probe, &stop).await {
        for r in records.iter().filter(|r| !r.retired) {
            verify::unanswered(&record_ctx(cfg, cluster, r, started, &quiet, stop.child_token()), "the cluster never became healthy");
        }
        return Ok(Vec::new());
    }
    let mut summaries = Vec::new();
    for r in records {
        if stop.is_cancelled() {
            break;
        }
        // Read again: a driver may have retired its stream (and deleted it) since the list
        // was read, and a stream judged from a stale record would be a false loss.
        let r = state.record(&r.run_id).unwrap_or(r);
        let ctx = Arc::new(record_ctx(cfg, cluster, &r, started, &quiet, stop.child_token()));
        if r.retired {
            summaries.push(json!({ "stream": ctx.stream, "retired": true, "last_acked": r.last_acked }));
            continue;
        }
        let check = verify::final_verification(&ctx, r.finished, true).await;
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
/// without a leader judges nothing, and one whose driver retires it meanwhile is dropped.
pub async fn watch_at_rest(cfg: &Config, cluster: &ClusterAddr, state: &StateDir, stop: CancellationToken) -> anyhow::Result<Vec<Value>> {
    let records: Vec<Record> = readable_records(state)?.into_iter().filter(|r| r.finished && !r.retired).collect();
    let (started, quiet) = (Instant::now(), QuietRequests::new(cfg.liveness.window));
    let probe = probe_ctx(cfg, cluster, started, &quiet, stop.child_token());
    // Connects in the background: an unreachable cluster makes each stream's look unknown.
    let client = probe.connect("anytime").await?;
    let mut summaries = Vec::new();
    let mut judged = 0;
    for r in records {
        let ctx = record_ctx(cfg, cluster, &r, started, &quiet, stop.child_token());
        let wanted = || state.record(&r.run_id).is_none_or(|now| !now.retired);
        let outcome = judge_stream(&ctx, &client, r.last_acked, &stop, &wanted).await;
        judged += usize::from(outcome.is_some_and(|o| o != properties::Outcome::Unknown));
        summaries.push(json!({ "stream": ctx.stream, "last_acked": r.last_acked, "stream_state": outcome.map_or(json!("retired"), |o| json!(o)) }));
    }
    sdk::check!(Property::AnytimeJudgedAFinishedStream, judged > 0, &json!({ "finished_streams": summaries.len(), "judged": judged }));
    Ok(summaries)
}

/// parallel_driver_step_down_leaders: an operator beside the drivers, for `duration`:
/// every few seconds it makes the leader of a stream some driver recorded and did not retire
/// step down (a running driver's, so leader changes land in the middle of pipelined
/// publishing and reading, or a finished one's), or, with no such stream or one time in
/// four, the meta leader (through the system account). So it acts even when it runs alone.
pub async fn operator(cfg: &Config, cluster: &ClusterAddr, state: &StateDir, source: Source, duration: std::time::Duration, stop: CancellationToken) -> anyhow::Result<Value> {
    let ctx = probe_ctx(cfg, cluster, Instant::now(), &QuietRequests::new(cfg.liveness.window), stop.clone());
    let client = ctx.connect("operator").await?;
    let system = crate::drivers::operator::system_client(&ctx).await;
    let mut rng = source.chooser(crate::random::Purpose::Stepdowns);
    let (mut asked, mut streams_done, mut meta_done) = (0u64, 0u64, 0u64);
    let end = Instant::now() + duration;
    while Instant::now() < end && !stop.is_cancelled() {
        let pause = rng.between("operator pause", std::time::Duration::from_secs(1), std::time::Duration::from_secs(10));
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(pause.min(end.saturating_duration_since(Instant::now()))) => {}
        }
        let live: Vec<String> = state.records()?.0.into_iter().filter(|r| !r.retired).map(|r| r.run_id).collect();
        let meta = system.as_ref().filter(|_| live.is_empty() || rng.chance("meta leader instead", 0.25));
        asked += 1;
        if let Some(system) = meta {
            match jsapi::request(system, "META.LEADER.STEPDOWN", &Value::Null, ctx.api_timeout()).await {
                Ok(_) => {
                    meta_done += 1;
                    sdk::hold!(Property::MetaLeaderSteppedDown);
                }
                Err(e) => tracing::info!("meta stepdown not done: {e}"),
            }
            continue;
        }
        if live.is_empty() {
            continue;
        }
        let run_id = live[rng.gen_range(0..live.len())].clone();
        let (stream, _) = names(&run_id);
        match jsapi::request(&client, &format!("STREAM.LEADER.STEPDOWN.{stream}"), &Value::Null, ctx.api_timeout()).await {
            Ok(_) => {
                streams_done += 1;
                sdk::check!(Property::OperatorSteppedDownALeader, true, &json!({ "stream": stream }));
                // The drivers leave stream stepdowns to this command: it reaches this one too.
                sdk::hold!(Property::StreamLeaderSteppedDown);
            }
            // Under faults a stepdown may find no leader or time out: nothing to judge.
            Err(e) => tracing::info!(%stream, "stepdown not done: {e}"),
        }
    }
    Ok(json!({ "stepdowns_asked": asked, "stepdowns_done": streams_done + meta_done, "stream_stepdowns_done": streams_done, "meta_stepdowns_done": meta_done }))
}

/// The operations a composer driver keeps for itself: the replica count (its record holds
/// the last one it requested, which eventually_ and finally_ judge the stream settled at),
/// `PEER.REMOVE` (it drops a copy before replacing it, so it needs the driver's monitor to
/// count the whole copies left) and the durable consumer it owns. Moves, evacuations and
/// stepdowns are commands of their own ([`Operations`], [`operator`]), so Antithesis
/// chooses what interleaves with what.
pub fn driver_owned(op: OpKind) -> bool {
    matches!(op, OpKind::Scale | OpKind::PeerRemove | OpKind::ConsumerStepdown | OpKind::ConsumerScale | OpKind::ConsumerPeerRemove | OpKind::ConsumerPeerEvacuate)
}

/// A family of operations run by a command of its own (see [`operate`]). None changes a
/// stream's replica count, which stays its driver's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operations {
    /// `parallel_driver_move_streams.sh`: placement changes, some cancelled.
    Moves,
    /// `parallel_driver_evacuate_peers.sh`: a stream's peer evacuated (the replacement
    /// added first), or a whole server.
    Evacuations,
}

impl Operations {
    fn includes(self, op: OpKind) -> bool {
        match self {
            Operations::Moves => matches!(op, OpKind::Move | OpKind::CancelMove),
            Operations::Evacuations => matches!(op, OpKind::PeerEvacuate | OpKind::ServerEvacuate),
        }
    }
}

/// parallel_driver_move_streams / parallel_driver_evacuate_peers: the operator limited to
/// one family of operations, for `duration`, on the stream of a running driver (one
/// recorded, neither finished nor retired), or, with none, on a stream of its own (created
/// with one replica fewer than the cluster has servers, so every operation has somewhere to
/// go, and deleted at the end). It stops as soon as the driver's record says finished: the
/// driver's final check and retirement must not meet an operation in flight. Each operation
/// is judged as the driver's own operator judges it.
pub async fn operate(cfg: &Config, cluster: &ClusterAddr, state: &StateDir, source: Source, duration: std::time::Duration, family: Operations, stop: CancellationToken) -> anyhow::Result<Value> {
    let (started, quiet) = (Instant::now(), QuietRequests::new(cfg.liveness.window));
    let mut cfg = cfg.clone();
    cfg.keep_operations(|op| family.includes(op));
    cfg.durable.enabled = false; // the driver's consumer is the driver's
    let mut rng = source.chooser(crate::random::Purpose::Operator);
    let running: Vec<Record> = readable_records(state)?.into_iter().filter(|r| !r.finished && !r.retired).collect();
    let own = running.is_empty();
    let record = if own {
        Record { run_id: format!("ops_{:016x}", rng.gen::<u64>()), seed: 0, payload_size: 1, last_acked: 0, replicas: 0, finished: false, open_suspicions: Vec::new(), verified_at_ms: None, retired: false }
    } else {
        running[rng.gen_range(0..running.len())].clone()
    };
    let cancel = stop.child_token();
    let ctx = Arc::new(record_ctx(&cfg, cluster, &record, started, &quiet, cancel.clone()));
    if own {
        let client = first_contact(&ctx).await.map_err(anyhow::Error::msg)?;
        let replicas = cluster.size.saturating_sub(1).max(1);
        let config = jsapi::stream_config(&ctx.stream, &ctx.subject, replicas, cfg.stream.duplicate_window);
        if let Err(e) = ctx.live.attempt("create stream", &cancel, || jsapi::create_stream(&client, &config, ctx.api_timeout())).await {
            anyhow::bail!("cannot create a stream to operate on: {e}");
        }
        ctx.stats.replicas.store(replicas as u64, Relaxed);
    }
    tracing::info!(stream = %ctx.stream, own, ?family, "operating");
    let driver_done = async {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            if !own && state.record(&record.run_id).is_none_or(|r| r.finished || r.retired) {
                return;
            }
        }
    };
    tokio::select! {
        r = crate::drivers::operator::run(ctx.clone(), rng) => r?,
        _ = tokio::time::sleep(duration) => {}
        _ = driver_done => tracing::info!(stream = %ctx.stream, "the driver finished: operating ends"),
        _ = stop.cancelled() => {}
    }
    cancel.cancel();
    if own {
        verify::delete_named(&ctx, &ctx.stream, "operated on and deleted").await;
    }
    Ok(json!({ "stream": ctx.stream, "own_stream": own, "operations": ctx.ops.to_json() }))
}
