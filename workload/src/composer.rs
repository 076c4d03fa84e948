//! The Antithesis Test Composer commands (`workload composer ...`).
//!
//! They share one state directory (a named volume): each driver records there which stream
//! it used and how far its acknowledgements got; the eventually_ and finally_ commands
//! verify every recorded stream from that record alone.

use crate::drivers::monitor::{Look, StreamWatch};
use crate::jsapi;
use crate::run::{self, RunSpec};
use crate::sdk;
use crate::state::{Ctx, Stats};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What one driver acknowledged: enough to verify its stream without it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub run_id: String,
    pub seed: u64,
    pub payload_size: usize,
    /// Every sequence up to this one was acknowledged (while the driver runs, a lower bound).
    pub last_acked: u64,
    /// The replica count requested last.
    pub replicas: u64,
    /// The driver stopped: nothing publishes to or scales the stream any more.
    pub finished: bool,
}

/// The directory the commands share.
#[derive(Clone, Debug)]
pub struct StateDir(pub PathBuf);

impl StateDir {
    fn streams(&self) -> PathBuf {
        self.0.join("streams")
    }

    /// Replaces the record of `r.run_id` at once (a reader never sees half of one).
    pub fn write(&self, r: &Record) -> anyhow::Result<()> {
        let dir = self.streams();
        std::fs::create_dir_all(&dir)?;
        let tmp = dir.join(format!(".{}.tmp", r.run_id));
        std::fs::write(&tmp, serde_json::to_vec_pretty(r)?)?;
        std::fs::rename(&tmp, dir.join(format!("{}.json", r.run_id)))?;
        Ok(())
    }

    /// Every record, in run-id order (run ids are seed-derived, not chronological); none when
    /// no driver has run yet.
    pub fn records(&self) -> anyhow::Result<Vec<Record>> {
        let dir = self.streams();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => anyhow::bail!("cannot read {}: {e}", dir.display()),
        };
        let mut records = Vec::new();
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "json") {
                let text = std::fs::read_to_string(&path)?;
                let r: Record = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("bad record {}: {e}", path.display()))?;
                records.push(r);
            }
        }
        records.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        Ok(records)
    }
}

/// Writes the driver's record now.
pub fn record(ctx: &Ctx, state: &StateDir, finished: bool) -> anyhow::Result<()> {
    state.write(&Record {
        run_id: ctx.run.run_id.clone(),
        seed: ctx.run.seed,
        payload_size: ctx.run.payload_size,
        last_acked: Stats::get(&ctx.stats.last_acked_seq),
        replicas: Stats::get(&ctx.stats.replicas),
        finished,
    })
}

/// The settings to verify `r`'s stream with: the base's, with the driver's run and payload.
fn verify_spec(base: &RunSpec, r: &Record) -> RunSpec {
    let mut cfg = base.cfg.clone();
    cfg.publish.payload_size = r.payload_size;
    RunSpec {
        cfg,
        servers: base.servers.clone(),
        monitor_urls: base.monitor_urls.clone(),
        cluster_size: base.cluster_size,
        seed: r.seed,
        run_id: r.run_id.clone(),
        duration: Duration::ZERO,
        injector: None,
        composer: None,
    }
}

/// Keeps the driver's record current while it runs, so a driver that is killed still
/// leaves what it had acknowledged a moment before.
pub async fn record_while_running(ctx: Arc<Ctx>, state: StateDir) -> anyhow::Result<()> {
    loop {
        if let Err(e) = record(&ctx, &state, false) {
            tracing::warn!("cannot record the run in {}: {e:#}", state.0.display());
        }
        tokio::select! {
            _ = ctx.cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// The container's long-lived command: a healthy cluster, `setup_complete` once, then idle
/// until stopped. False when the cluster never became healthy (reported).
pub async fn entrypoint(spec: &RunSpec, stop: CancellationToken) -> anyhow::Result<bool> {
    let ctx = run::context(spec, stop.clone(), Instant::now());
    if run::ready(&ctx).await?.is_none() {
        return Ok(false);
    }
    sdk::setup_complete(&json!({ "servers": ctx.servers, "cluster_size": ctx.cluster_size }));
    tracing::info!("setup complete; idle until stopped");
    stop.cancelled().await;
    Ok(true)
}

/// Verifies every recorded stream (eventually_ and finally_): a healthy cluster, each stream
/// there and covering its acks, settled where its driver finished, every acknowledged message
/// read back with its content. Returns one summary per stream for the report.
pub async fn verify(base: &RunSpec, state: &StateDir, stop: CancellationToken) -> anyhow::Result<Vec<Value>> {
    let records = state.records()?;
    let started = Instant::now();
    let probe = run::context(base, stop.child_token(), started);
    tracing::info!(streams = records.len(), "verifying every recorded stream");
    if run::ready(&probe).await?.is_none() {
        return Ok(Vec::new());
    }
    let mut summaries = Vec::new();
    for r in records {
        if stop.is_cancelled() {
            break;
        }
        let spec = verify_spec(base, &r);
        let ctx = Arc::new(run::context(&spec, stop.child_token(), started));
        ctx.stats.last_acked_seq.store(r.last_acked, Relaxed);
        ctx.stats.replicas.store(r.replicas, Relaxed);
        let complete = run::final_verification(&ctx, r.finished).await?;
        summaries.push(json!({
            "stream": ctx.stream,
            "last_acked": r.last_acked,
            "driver_finished": r.finished,
            "verified": Stats::get(&ctx.stats.final_verified),
            "read_complete": complete,
        }));
    }
    Ok(summaries)
}

/// anytime_: while faults go on, every finished driver's stream must still exist and hold
/// every acknowledged message (nobody watches it any more otherwise until finally_). Each
/// stream is looked at until its state is whole or a bad state is confirmed over
/// `liveness.quiet`; a stream without a leader judges nothing and is left for later.
pub async fn watch_at_rest(base: &RunSpec, state: &StateDir, stop: CancellationToken) -> anyhow::Result<Vec<Value>> {
    let records: Vec<Record> = state.records()?.into_iter().filter(|r| r.finished).collect();
    let started = Instant::now();
    let probe = run::context(base, stop.child_token(), started);
    let Ok(connected) = tokio::time::timeout(base.cfg.liveness.window, probe.connect("anytime")).await else {
        tracing::info!("no connection within a liveness window: nothing judged");
        return Ok(Vec::new());
    };
    let client = connected?;
    let mut summaries = Vec::new();
    for r in records {
        let spec = verify_spec(base, &r);
        let ctx = run::context(&spec, stop.child_token(), started);
        let mut watch = StreamWatch::new(ctx.cfg.liveness.quiet);
        let deadline = Instant::now() + ctx.cfg.liveness.quiet + Duration::from_secs(10);
        let look = loop {
            let answer = jsapi::stream_info_deleted(&client, &ctx.stream, ctx.api_timeout()).await;
            let look = watch.observe(&ctx, &answer, r.last_acked);
            if matches!(look, Look::Whole | Look::Reported) || Instant::now() > deadline || stop.is_cancelled() {
                break look;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        summaries.push(json!({ "stream": ctx.stream, "last_acked": r.last_acked, "look": format!("{look:?}") }));
    }
    Ok(summaries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir(dir.path().to_path_buf());
        assert!(state.records().unwrap().is_empty(), "no driver ran yet");
        let r = Record { run_id: "b1".into(), seed: 7, payload_size: 128, last_acked: 42, replicas: 3, finished: false };
        state.write(&r).unwrap();
        state.write(&Record { last_acked: 43, finished: true, ..r.clone() }).unwrap();
        state.write(&Record { run_id: "a0".into(), ..r.clone() }).unwrap();
        let got = state.records().unwrap();
        assert_eq!(got.iter().map(|r| (r.run_id.as_str(), r.last_acked)).collect::<Vec<_>>(), [("a0", 42), ("b1", 43)]);
        std::fs::write(dir.path().join("streams/c2.json"), "{\"run_id\": 1}").unwrap();
        let err = state.records().unwrap_err().to_string();
        assert!(err.contains("c2.json"), "{err}");
    }
}
