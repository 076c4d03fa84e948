//! One run: set up the stream, drive publisher, reader, operator and monitor for the
//! duration, stop them, then verify everything acknowledged with faults paused.

use crate::config::Config;
use crate::drivers::{self, operator};
use crate::faults::injector::Injector;
use crate::faults::QuietRequests;
use crate::jsapi;
use crate::random::Source;
use crate::records::{self, StateDir};
use crate::sdk;
use crate::state::{ClusterAddr, Ctx, Stats};
use crate::verify::{self, final_verification, first_contact, FinalCheck};
use properties::payload::RunMessages;
use properties::Property;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub use crate::state::names;

pub struct RunSpec {
    pub cfg: Config,
    pub cluster: ClusterAddr,
    pub seed: u64,
    /// Where the operator's choices come from.
    pub source: Source,
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
    /// The final verification (none for a composer driver).
    pub check: Option<FinalCheck>,
    /// Suspicions open when the drivers stopped, with what answered them.
    pub suspicions_at_stop: Vec<Value>,
    /// Quiet periods while the drivers ran: granted, refused, the time faults were allowed.
    pub quiet: Value,
}

/// Why a run ended without driving anything.
#[derive(Debug, thiserror::Error)]
pub enum NotRun {
    /// The cluster could not be reached or made ready: nothing was tested.
    #[error("{0}")]
    Setup(String),
    #[error("stopped before the drivers started")]
    Stopped,
}

pub async fn run(spec: RunSpec, stop: CancellationToken) -> Result<Finished, NotRun> {
    let started = Instant::now();
    let run = RunMessages::new(&spec.run_id, spec.seed, spec.cfg.publish.payload_size);
    let mut ctx = Ctx::new(&spec.cfg, &spec.cluster, run, started, QuietRequests::new(spec.cfg.liveness.window), stop.child_token());
    ctx.faults = spec.injector.as_ref().map(|i| i.log.clone());
    let ctx = Arc::new(ctx);
    let composer = spec.composer;

    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(progress(ctx.clone(), started));
    if let Err(e) = setup(&ctx, composer.is_none()).await {
        let _ = drivers::stop(&ctx, tasks).await;
        return Err(e);
    }
    drivers::spawn_core(&ctx, &mut tasks);
    if ctx.cfg.durable.enabled {
        tasks.spawn(drivers::durable::run(ctx.clone(), spec.source.chooser(0xD0AB1E)));
    }
    if ctx.cfg.operator.enabled && ctx.cluster.size > 1 {
        tasks.spawn(operator::run(ctx.clone(), spec.source.chooser(0x5CA1E)));
    }
    if let Some(state) = &composer {
        tasks.spawn(records::record_while_running(ctx.clone(), state.clone()));
    }
    if let Some(injector) = spec.injector {
        // Joined with the drivers, so every fault is healed before the final verification.
        tasks.spawn(injector.run(ctx.cancel.clone(), ctx.live.quiet.subscribe(), started, ctx.view.clone()));
    }

    tokio::select! {
        _ = tokio::time::sleep(spec.duration) => tracing::info!("duration reached; stopping drivers"),
        _ = stop.cancelled() => tracing::info!("stop requested; stopping drivers"),
    }
    // A driver's error is logged; the final verification still runs.
    let _ = drivers::stop(&ctx, tasks).await;
    let quiet = ctx.live.quiet.summary(started);

    if let Some(state) = &composer {
        if let Err(e) = records::record(&ctx, state, true) {
            tracing::error!("cannot record the run in {}: {e:#}", state.0.display());
        }
        let check = if ctx.cfg.composer.retire_verified { Some(records::check_and_retire(&ctx, state).await) } else { None };
        return Ok(Finished { elapsed: started.elapsed(), ctx, check, suspicions_at_stop: Vec::new(), quiet });
    }
    let open = ctx.suspicions.take();
    if !open.is_empty() {
        tracing::info!(?open, "suspicions open when the drivers stopped: the final verification answers them");
    }
    let check = final_verification(&ctx, true, true).await;
    let suspicions_at_stop = check.answer(open);
    Ok(Finished { elapsed: started.elapsed(), ctx, check: Some(check), suspicions_at_stop, quiet })
}

/// The cluster reached and ready, and the run's stream created. For `workload run` and
/// `local` this is first contact: failing is "could not be carried out". A composer driver
/// starts under faults against a cluster the entrypoint already found ready, so failing
/// there is `cluster-eventually-healthy` failing (reported), then `Stopped`.
async fn setup(ctx: &Ctx, first: bool) -> Result<(), NotRun> {
    let client = if first {
        first_contact(ctx).await.map_err(NotRun::Setup)?
    } else {
        if !verify::recovered(ctx, &ctx.cancel).await {
            return Err(NotRun::Stopped);
        }
        ctx.connect("setup").await.map_err(|_| NotRun::Stopped)?
    };
    let replicas = ctx.cfg.stream.initial_replicas.min(ctx.cluster.size).max(1);
    let config = jsapi::stream_config(&ctx.stream, &ctx.subject, replicas, ctx.cfg.stream.duplicate_window);
    let create = || jsapi::create_stream(&client, &config, ctx.api_timeout());
    if first {
        let window = ctx.cfg.liveness.window;
        ctx.live.attempt("create stream", &ctx.cancel, create).await.map_err(|e| NotRun::Setup(format!("cannot create the stream {} within {window:?}: {e}", ctx.stream)))?;
    } else if ctx.live.retry("create stream", Property::ClusterEventuallyHealthy, &ctx.cancel, create).await.is_none() {
        return Err(NotRun::Stopped);
    }
    ctx.stats.replicas.store(replicas as u64, std::sync::atomic::Ordering::Relaxed);
    if first {
        sdk::setup_complete(&json!({ "stream": ctx.stream, "replicas": replicas, "servers": ctx.cluster.servers }));
    }
    tracing::info!(stream = %ctx.stream, replicas, "stream created");
    Ok(())
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
            "t={:.0}s acked={} ({:.0}/s) verified={} ({:.0}/s) lag={} replicas={} leader={} rewinds={} recreates={} scales={} faults={} quiet={} failed={} client_errors={} rss={}MiB",
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
            crate::logs::client_errors(),
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
