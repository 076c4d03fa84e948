//! One run: set up the stream, drive publisher, reader, scaler and monitor for the
//! duration, stop them, then verify everything acknowledged with faults paused.

use crate::cluster::{http_client, unhealthy};
use crate::composer::{self, StateDir};
use crate::config::Config;
use crate::drivers::monitor::{Look, StreamWatch};
use crate::drivers::{self, reader, scaler};
use crate::faults::injector::Injector;
use crate::faults::QuietRequests;
use crate::jsapi;
use crate::retry::Liveness;
use crate::sdk;
use crate::state::{Ctx, Stats};
use properties::payload::RunMessages;
use properties::Property;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub struct RunSpec {
    pub cfg: Config,
    pub servers: Vec<String>,
    pub monitor_urls: Vec<String>,
    pub cluster_size: usize,
    pub seed: u64,
    pub run_id: String,
    pub duration: Duration,
    /// The local fault injector, for `workload local`.
    pub injector: Option<Injector>,
    /// A Test Composer driver: no `setup_complete` (the entrypoint's), no final
    /// verification (the eventually_/finally_ commands'), and what was acknowledged is
    /// recorded in this state directory while the run goes on.
    pub composer: Option<StateDir>,
}

/// What a finished run hands to the report.
pub struct Finished {
    pub ctx: Arc<Ctx>,
    pub elapsed: Duration,
    /// Whether the final verification ran to its end.
    pub final_read_complete: bool,
}

/// The stream and subject of a run.
pub fn names(run_id: &str) -> (String, String) {
    (format!("WORKLOAD_{run_id}"), format!("workload.{run_id}"))
}

/// The shared state of one run on `run_id`'s stream; its drivers stop with `cancel`.
pub fn context(spec: &RunSpec, cancel: CancellationToken, started: Instant) -> Ctx {
    let (stream, subject) = names(&spec.run_id);
    Ctx {
        run: RunMessages::new(&spec.run_id, spec.seed, spec.cfg.publish.payload_size),
        cfg: spec.cfg.clone(),
        stream,
        subject,
        servers: spec.servers.clone(),
        monitor_urls: spec.monitor_urls.clone(),
        cluster_size: spec.cluster_size,
        live: Liveness { cfg: spec.cfg.window(), origin: started, quiet: QuietRequests::default(), give_up: false },
        cancel,
        stats: Arc::new(Stats::default()),
        faults: spec.injector.as_ref().map(|i| i.log.clone()),
    }
}

pub async fn run(spec: RunSpec, stop: CancellationToken) -> anyhow::Result<Finished> {
    let started = Instant::now();
    let ctx = Arc::new(context(&spec, stop.child_token(), started));
    let composer = spec.composer;

    if !setup(&ctx, composer.is_none()).await? {
        return Ok(Finished { elapsed: started.elapsed(), ctx, final_read_complete: false });
    }

    let mut tasks = tokio::task::JoinSet::new();
    drivers::spawn_core(&ctx, &mut tasks);
    if ctx.cfg.scale.enabled && ctx.cluster_size > 1 {
        tasks.spawn(scaler::run(ctx.clone(), spec.seed));
    }
    tasks.spawn(progress(ctx.clone(), started));
    if let Some(state) = &composer {
        tasks.spawn(composer::record_while_running(ctx.clone(), state.clone()));
    }
    if let Some(injector) = spec.injector {
        // Joined with the drivers, so every fault is healed before the final verification.
        tasks.spawn(injector.run(ctx.cancel.clone(), ctx.live.quiet.subscribe(), started));
    }

    tokio::select! {
        _ = tokio::time::sleep(spec.duration) => tracing::info!("duration reached; stopping drivers"),
        _ = stop.cancelled() => tracing::info!("stop requested; stopping drivers"),
    }
    // A driver's error is logged; the final verification still runs.
    let _ = drivers::stop(&ctx, tasks).await;

    if let Some(state) = &composer {
        composer::record(&ctx, state, true)?;
        return Ok(Finished { elapsed: started.elapsed(), ctx, final_read_complete: false });
    }
    let final_read_complete = final_verification(&ctx, true).await?;
    Ok(Finished { elapsed: started.elapsed(), ctx, final_read_complete })
}

/// A connection to a cluster whose every node is healthy, each within a liveness window.
/// None when that failed (reported) or the run was stopped.
pub async fn ready(ctx: &Ctx) -> anyhow::Result<Option<async_nats::Client>> {
    let client = match tokio::time::timeout(ctx.cfg.liveness.window, ctx.connect("setup")).await {
        Ok(client) => client?,
        Err(_) => {
            sdk::check(Property::ClusterEventuallyHealthy, false, &json!({
                "op": "connect", "servers": ctx.servers, "elapsed_s": ctx.cfg.liveness.window.as_secs_f64() }));
            return Ok(None);
        }
    };
    Ok(wait_healthy(ctx, &ctx.cancel).await.then_some(client))
}

/// Healthy cluster and the stream in place, each within a liveness window; then
/// `setup_complete` when `announce`. False when stopped before that.
async fn setup(ctx: &Ctx, announce: bool) -> anyhow::Result<bool> {
    let Some(client) = ready(ctx).await? else { return Ok(false) };
    let replicas = ctx.cfg.stream.initial_replicas.min(ctx.cluster_size).max(1);
    let config = jsapi::stream_config(&ctx.stream, &ctx.subject, replicas, ctx.cfg.stream.duplicate_window);
    let create = || jsapi::create_stream(&client, &config, ctx.api_timeout());
    if ctx.live.retry("create stream", Property::ClusterEventuallyHealthy, &ctx.cancel, create).await.is_none() {
        return Ok(false);
    }
    ctx.stats.replicas.store(replicas as u64, std::sync::atomic::Ordering::Relaxed);
    if announce {
        sdk::setup_complete(&json!({ "stream": ctx.stream, "replicas": replicas, "servers": ctx.servers }));
    }
    tracing::info!(stream = %ctx.stream, replicas, "stream created");
    Ok(true)
}

/// Every known node answers `/healthz` with 200, within a liveness window.
async fn wait_healthy(ctx: &Ctx, cancel: &CancellationToken) -> bool {
    let http = http_client();
    let check = || async {
        let sick = unhealthy(&http, &ctx.monitor_urls).await;
        if sick.is_empty() { Ok(()) } else { Err(format!("not healthy: {}", sick.join(", "))) }
    };
    ctx.live.retry("cluster health", Property::ClusterEventuallyHealthy, cancel, check).await.is_some()
}

/// With faults paused: the cluster heals, the stream still covers every ack, the last
/// requested replica count settles (when `settle`: nobody scales it any more), and a full
/// read verifies 1 ..= last ack. True when the read ran to its end.
pub async fn final_verification(ctx: &Arc<Ctx>, settle: bool) -> anyhow::Result<bool> {
    let cancel = CancellationToken::new();
    let last_acked = Stats::get(&ctx.stats.last_acked_seq);
    tracing::info!(last_acked, "final verification");
    ctx.live.quiet.request(ctx.cfg.liveness.window, "final verification");
    let final_ctx = ctx.with_cancel(&cancel, true);
    if !wait_healthy(&final_ctx, &cancel).await {
        return Ok(false);
    }
    let client = final_ctx.connect("final").await?;
    // The stream must exist and cover the acks; a few looks, since the last faults may
    // have just healed (a stale answer is not a verdict).
    let mut watch = StreamWatch::new(Duration::from_secs(5));
    let mut window = ctx.live.open("final stream state", Property::ClusterEventuallyHealthy);
    loop {
        let answer = jsapi::stream_info_deleted(&client, &ctx.stream, ctx.api_timeout()).await;
        match watch.observe(ctx, &answer, last_acked) {
            Look::Whole => break,
            Look::Reported if answer.is_err() => {
                tracing::error!("the stream is gone: nothing left to read");
                return Ok(false);
            }
            Look::Reported => break,
            Look::Pending => tokio::time::sleep(Duration::from_secs(1)).await,
            Look::Unobserved => {
                let error = answer.err().map_or_else(|| "stream has no leader".to_string(), |e| e.to_string());
                if !window.failed(&error, &cancel).await {
                    break;
                }
            }
        }
    }
    if settle && ctx.cfg.scale.enabled && ctx.cluster_size > 1 {
        let replicas = Stats::get(&ctx.stats.replicas) as usize;
        scaler::wait_settled(&final_ctx, &client, replicas).await;
    }
    let next = reader::read(&final_ctx, reader::Until::Seq(last_acked), &ctx.stats.final_verified).await?;
    let complete = next > last_acked;
    if complete && Stats::get(&ctx.stats.final_verified) >= last_acked {
        sdk::hold(Property::AckedMessageNeverLost); // every ack read back, verified
    }
    Ok(complete)
}

/// A progress line every `report.progress_interval`.
async fn progress(ctx: Arc<Ctx>, started: Instant) -> anyhow::Result<()> {
    let every = ctx.cfg.report.progress_interval;
    let (mut acked0, mut verified0) = (0, 0);
    loop {
        tokio::select! {
            _ = ctx.cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(every) => {}
        }
        let s = &ctx.stats;
        let (acked, verified) = (Stats::get(&s.acked), Stats::get(&s.verified));
        let rss = rss_mib();
        if let Some(kib) = rss.map(|m| (m * 1024.0) as u64) {
            let _ = s.rss_kib_first.compare_exchange(0, kib, std::sync::atomic::Ordering::Relaxed, std::sync::atomic::Ordering::Relaxed);
            s.rss_kib_max.fetch_max(kib, std::sync::atomic::Ordering::Relaxed);
        }
        let secs = every.as_secs_f64();
        let leader = s.leader.lock().map(|l| l.clone()).unwrap_or_default();
        tracing::info!(
            "t={:.0}s acked={} ({:.0}/s) verified={} ({:.0}/s) lag={} replicas={} leader={} rewinds={} recreates={} scales={} faults={} quiet={} failed={} rss={}MiB",
            started.elapsed().as_secs_f64(),
            acked,
            (acked - acked0) as f64 / secs,
            verified,
            (verified - verified0) as f64 / secs,
            Stats::get(&s.last_acked_seq).saturating_sub(verified),
            Stats::get(&s.replicas),
            leader,
            Stats::get(&s.rewinds),
            Stats::get(&s.consumer_recreates),
            Stats::get(&s.scale_requests),
            ctx.faults.as_ref().map_or(0, |f| f.starts()),
            ctx.live.quiet.count(),
            sdk::failures_so_far(),
            rss.map_or("?".into(), |m| format!("{m:.1}")),
        );
        (acked0, verified0) = (acked, verified);
    }
}

/// Resident set size of this process, from /proc.
pub fn rss_mib() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096.0 / (1024.0 * 1024.0))
}
