//! One run: set up the stream, drive publisher, reader, operator and monitor for the
//! duration, stop them, then verify everything acknowledged with faults paused.

pub mod composer;
pub mod records;
pub mod verify;

use crate::history;
use crate::config::Config;
use crate::drivers::{self, operator};
use crate::faults::injector::Injector;
use crate::faults::QuietRequests;
use crate::nats::jsapi;
use crate::random::{Purpose, Source};
use records::StateDir;
use crate::sdk;
use crate::context::state::{ClusterAddr, Ctx, Stats};
use crate::context::streams::Streams;
use verify::{final_verification, first_contact, FinalCheck};
use crate::nats::view::ClusterView;
use properties::payload::RunMessages;
use properties::Property;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub use crate::context::state::names;

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
    /// The log of every fault in the run, when the run knows them all (a cluster only this
    /// process faults, the injector on or off): outages are judged against it.
    pub known_faults: Option<Arc<crate::faults::log::FaultLog>>,
    /// A Test Composer driver: no `setup_complete` (the entrypoint's), no final
    /// verification (the eventually_/finally_ commands'), and what was acknowledged is
    /// recorded in this state directory while the run goes on.
    pub composer: Option<StateDir>,
    /// Where one sample a second goes (`timeline.jsonl`), for the report's picture.
    pub timeline: Option<std::path::PathBuf>,
    /// The run's directory: `operations.jsonl` (the known-issue table reads it), and a
    /// failed epoch's saved node state.
    pub out: Option<std::path::PathBuf>,
}

/// What a finished run hands to the report.
pub struct Finished {
    /// One per stream, in order (the last epoch's, when the run rotated its streams).
    pub streams: Vec<StreamDone>,
    /// The epochs finished before the last one, when the run rotated its streams.
    pub epochs: Vec<Epoch>,
    pub elapsed: Duration,
    /// Quiet periods while the drivers ran: granted, refused, the time faults were allowed.
    pub quiet: Value,
    /// Why the run stopped before its duration: the cluster did not become healthy again
    /// for the next epoch's streams (`cluster-eventually-healthy` says so too).
    pub ended_early: Option<String>,
}

/// One finished epoch of a run that rotates its streams: its streams, each verified in
/// full with faults paused, then deleted. When a check failed, the nodes' state is saved
/// first: a failed stream kept in the cluster would keep its `/healthz` failing, and every
/// later epoch would then wait in vain for a healthy cluster.
pub struct Epoch {
    pub index: usize,
    pub started_s: f64,
    pub ended_s: f64,
    pub streams: Vec<StreamDone>,
    /// Every check of every stream held.
    pub held: bool,
    /// Every stream was deleted.
    pub deleted: bool,
    /// Where the nodes' state was saved (a check failed).
    pub state_saved_in: Option<std::path::PathBuf>,
}

impl Epoch {
    fn facts(&self) -> Value {
        let mut facts = epoch_facts(self.index, self.started_s, self.ended_s, &self.streams);
        facts["held"] = json!(self.held);
        facts["deleted"] = json!(self.deleted);
        facts["state_saved_in"] = json!(self.state_saved_in);
        facts
    }
}

fn epoch_facts(index: usize, started_s: f64, ended_s: f64, streams: &[StreamDone]) -> Value {
    json!({ "epoch": index, "started_s": started_s, "ended_s": ended_s,
            "streams": streams.iter().map(StreamDone::facts).collect::<Vec<_>>() })
}

/// One stream's part of a finished run.
pub struct StreamDone {
    pub ctx: Arc<Ctx>,
    /// The final verification (none for a composer driver).
    pub check: Option<FinalCheck>,
    /// Suspicions open when the drivers stopped, with what answered them.
    pub suspicions_at_stop: Vec<Value>,
    /// Liveness windows the run was stopped under, each reported unknown.
    pub windows_left_open: Vec<crate::context::retry::LeftOpen>,
}

impl StreamDone {
    /// What became of this stream's messages (after a final verification).
    fn messages(&self) -> Option<properties::outcomes::MessageOutcomes> {
        let check = self.check.as_ref()?;
        let lost = self.ctx.lost.lock().unwrap_or_else(|p| p.into_inner());
        Some(properties::outcomes::outcomes(Stats::get(&self.ctx.stats.sent_high), check.last_acked, check.read_up_to, &lost))
    }

    fn facts(&self) -> Value {
        json!({
            "stream": self.ctx.stream,
            "run_id": self.ctx.run.run_id,
            "final_check": self.check,
            "suspicions_at_stop": self.suspicions_at_stop,
            "windows_left_open": self.windows_left_open,
            "counters": self.ctx.stats.to_json(),
            "messages": self.messages(),
        })
    }
}

impl Finished {
    /// The run's part of `report.json`. With one stream, that stream's facts; with several,
    /// totals (counters summed, final checks joined, message outcomes counted without their
    /// ranges), the slowest stream (fewest acks), and each stream's own facts in `per_stream`.
    /// A run that rotated its streams gives the totals over every epoch's streams, and
    /// each epoch's own facts in `epochs` (the last one too).
    pub fn facts(&self) -> Value {
        let first = &self.streams[0].ctx;
        let all: Vec<&StreamDone> = self.epochs.iter().flat_map(|e| &e.streams).chain(&self.streams).collect();
        let mut facts = if let ([one], true) = (&self.streams[..], self.epochs.is_empty()) {
            one.facts()
        } else {
            let outcomes: Vec<_> = all.iter().filter_map(|s| s.messages()).collect();
            let sum = |f: fn(&properties::outcomes::MessageOutcomes) -> u64| outcomes.iter().map(f).sum::<u64>();
            let ctxs: Vec<Arc<Ctx>> = self.streams.iter().map(|s| s.ctx.clone()).collect();
            let mut facts = json!({
                "final_check": FinalCheck::joined(all.iter().filter_map(|s| s.check.as_ref())),
                "suspicions_at_stop": all.iter().flat_map(|s| s.suspicions_at_stop.iter().cloned()).collect::<Vec<_>>(),
                "windows_left_open": all.iter().flat_map(|s| s.windows_left_open.iter()).collect::<Vec<_>>(),
                "counters": Stats::total(all.iter().map(|s| &*s.ctx.stats)),
                "messages": (outcomes.len() == all.len()).then(|| json!({
                    "sent": sum(|m| m.sent), "acked": sum(|m| m.acked), "ok": sum(|m| m.ok), "lost": sum(|m| m.lost),
                    "unknown": sum(|m| m.unknown), "lost_range_count": outcomes.iter().map(|m| m.lost_range_count).sum::<usize>(),
                })),
            });
            if self.epochs.is_empty() {
                facts["slowest_stream"] = json!(slowest(&ctxs).map(|c| &c.stream));
                facts["per_stream"] = json!(self.streams.iter().map(StreamDone::facts).collect::<Vec<_>>());
            } else {
                let mut epochs: Vec<Value> = self.epochs.iter().map(Epoch::facts).collect();
                let since = self.epochs.last().map_or(0.0, |e| e.ended_s);
                let mut last = epoch_facts(self.epochs.len(), since, self.elapsed.as_secs_f64(), &self.streams);
                last["held"] = json!(self.streams.iter().all(|s| s.check.as_ref().is_some_and(FinalCheck::all_held)));
                last["deleted"] = json!(false);
                epochs.push(last);
                facts["epochs"] = json!(epochs);
            }
            facts
        };
        let check = |s: &&StreamDone| s.check.as_ref().map(|c| c.read != properties::Outcome::Unknown);
        facts["final_read_complete"] = json!(all.iter().map(check).reduce(|a, b| Some(a? && b?)).flatten());
        facts["elapsed_s"] = json!(self.elapsed.as_secs_f64());
        facts["operations"] = first.ops.to_json();
        facts["quiet_requests"] = json!(first.live.quiet.count());
        facts["quiet"] = self.quiet.clone();
        facts["ended_early"] = json!(self.ended_early);
        facts
    }
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

/// The run id of stream `i` of `n`: the run's own when it drives one.
pub fn stream_run_id(run_id: &str, i: usize, n: usize) -> String {
    if n == 1 { run_id.to_string() } else { format!("{run_id}_{}", i + 1) }
}

/// The run id of epoch `epoch` of a stream whose run id is `id` (the first keeps it).
pub fn epoch_run_id(id: &str, epoch: usize) -> String {
    if epoch == 0 { id.to_string() } else { format!("{id}_e{epoch}") }
}

pub async fn run(spec: RunSpec, stop: CancellationToken) -> Result<Finished, NotRun> {
    let started = Instant::now();
    history::mark_run_started(started);
    let n = spec.cfg.stream.count;
    // One stop signal, one quiet mechanism, one fault log, one tally of operations and one
    // view per stream slot for the whole run; the rest (numbers, suspicions, ledgers) is
    // each stream's own, and a rotation starts them afresh.
    // Not a child of `stop`: a stop request ends the drivers the way the duration's end does
    // (they finish what they have open, see `finish_drivers`), not at once. A second signal
    // exits without a report (the CLI's).
    let run_stop = CancellationToken::new();
    let quiet = QuietRequests::new(spec.cfg.liveness.window);
    let faults = spec.known_faults.clone();
    let ops: Arc<crate::context::ops::OpTally> = Arc::default();
    if let Some(dir) = &spec.out {
        // Beside the report and the fault log.
        ops.log_to(dir.join("operations.jsonl"), started);
    }
    let views: Vec<Arc<ClusterView>> = (0..n).map(|_| Arc::default()).collect();
    let out_dir = spec.out.clone();
    let epoch_ctxs = |epoch: usize, cancel: &CancellationToken| -> Vec<Arc<Ctx>> {
        (0..n)
            .map(|i| {
                let id = epoch_run_id(&stream_run_id(&spec.run_id, i, n), epoch);
                let run = RunMessages::new(id, spec.seed, spec.cfg.publish.payload_size);
                let mut ctx = Ctx::new(&spec.cfg, &spec.cluster, run, started, quiet.clone(), cancel.clone());
                ctx.faults.clone_from(&faults);
                ctx.ops = ops.clone();
                ctx.view = views[i].clone();
                ctx.view.start_stream(&ctx.stream);
                Arc::new(ctx)
            })
            .collect()
    };
    let mut ctxs = epoch_ctxs(0, &run_stop.child_token());
    let streams = Streams::new(ctxs.clone());
    let composer = spec.composer;

    if let Some(addr) = spec.cfg.report.metrics {
        crate::report::metrics::serve(addr).map_err(|e| NotRun::Setup(e.to_string()))?;
    }
    // The run's own tasks: they outlive every epoch's drivers.
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(progress(streams.clone(), run_stop.clone(), started));
    if let Some(path) = spec.timeline.clone() {
        tasks.spawn(crate::report::timeline::record(streams.clone(), run_stop.clone(), started, path));
    }
    if spec.cfg.report.metrics.is_some() {
        // Not one of the drivers: it goes on through the final verification.
        tokio::spawn(crate::report::metrics::export(streams.clone()));
    }
    let set_up = tokio::select! {
        r = setup(&ctxs, if composer.is_none() { Setup::FirstContact } else { Setup::Composer }) => r,
        _ = stop.cancelled() => Err(NotRun::Stopped),
    };
    if let Err(e) = set_up {
        ctxs.iter().for_each(|c| c.cancel.cancel());
        run_stop.cancel();
        let _ = drivers::join(tasks).await;
        return Err(e);
    }
    let mut drivers = spawn_drivers(&ctxs, &spec.source, composer.as_ref());
    if let Some(injector) = spec.injector {
        // Joined with the drivers, so every fault is healed before the final verification.
        // Its strikes aim at the first stream's roles; what destroys data waits for every
        // stream's copies.
        tasks.spawn(injector.guarding(views[1..].to_vec()).run(run_stop.clone(), quiet.subscribe(), started, views[0].clone()));
    }

    let end = tokio::time::Instant::from_std(started + spec.duration);
    let rotation = if composer.is_some() { Rotation::default() } else { Rotation::of(&spec.cfg) };
    let mut epochs: Vec<Epoch> = Vec::new();
    let mut epoch_started = started;
    let mut ended_early = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(end) => {
                tracing::info!("duration reached; stopping drivers");
                break;
            }
            _ = stop.cancelled() => {
                tracing::info!("stop requested; stopping drivers");
                break;
            }
            _ = rotation.due(&ctxs, epoch_started) => {}
        }
        // Rotate: this epoch's streams are finished and verified like a run's end, and
        // fresh ones take their place.
        let index = epochs.len();
        tracing::info!(epoch = index, "rotating: stopping this epoch's drivers to verify its streams");
        let _ = finish_drivers(&ctxs, drivers, true).await;
        let done = verify_all(ctxs.clone()).await;
        let held = done.iter().all(|d| d.check.as_ref().is_some_and(FinalCheck::all_held));
        let mut state_saved_in = None;
        if !held {
            tracing::warn!(epoch = index, "not every check held: the nodes' state is saved, then the epoch's streams are deleted");
            if let Some(dir) = &out_dir {
                state_saved_in = verify::save_node_state(&ctxs[0].cluster.monitor_urls, &dir.join(format!("epoch-{index}-state"))).await;
            }
        }
        let mut deleted = true;
        for d in &done {
            deleted &= verify::delete_stream(&d.ctx, held).await;
        }
        let ended_s = started.elapsed().as_secs_f64();
        epochs.push(Epoch { index, started_s: epoch_started.duration_since(started).as_secs_f64(), ended_s, streams: done, held, deleted, state_saved_in });
        epoch_started = Instant::now();
        ctxs = epoch_ctxs(index + 1, &run_stop.child_token());
        streams.rotate(ctxs.clone());
        // The next epoch's setup waits at most one liveness window for a healthy cluster
        // (then cluster-eventually-healthy fails and the run ends early), and never past
        // the run's end.
        let next = tokio::select! {
            r = setup(&ctxs, Setup::NextEpoch) => r.map_err(|_| "the cluster did not become healthy, or the next epoch's streams could not be created, within a liveness window".to_string()),
            _ = tokio::time::sleep_until(end) => Err("the duration ended during the next epoch's setup".to_string()),
            _ = stop.cancelled() => Err("stop requested during the next epoch's setup".to_string()),
        };
        if let Err(why) = next {
            // Nothing of the next epoch to verify.
            if !stop.is_cancelled() && tokio::time::Instant::now() < end {
                tracing::warn!(epoch = index + 1, "{why}: the run ends early");
                ended_early = Some(why);
            }
            drivers = tokio::task::JoinSet::new();
            ctxs.clear();
            break;
        }
        tracing::info!(epoch = index + 1, streams = ?ctxs.iter().map(|c| &c.stream).collect::<Vec<_>>(), "epoch started");
        drivers = spawn_drivers(&ctxs, &spec.source, composer.as_ref());
    }
    // A driver's error is logged; the final verification still runs. A composer driver
    // stopped by a signal (Antithesis stops the drivers before an eventually_ command)
    // stops at once, and what it had open is unknown.
    if composer.is_some() && stop.is_cancelled() {
        if let Some(first) = ctxs.first() {
            let _ = drivers::stop(first, drivers).await;
        }
    } else {
        let _ = finish_drivers(&ctxs, drivers, composer.is_none()).await;
    }
    run_stop.cancel();
    let _ = drivers::join(tasks).await;
    let quiet = quiet.summary(started);

    if let Some(state) = &composer {
        // A composer driver drives one stream (validated) and never rotates.
        let first = ctxs[0].clone();
        if let Err(e) = records::record(&first, state, true) {
            tracing::error!("cannot record the run in {}: {e:#}", state.0.display());
        }
        // Only a driver that ran its course retires its stream: one stopped by a signal (as
        // Antithesis stops every command when an eventually_ starts) leaves it to the
        // verifying commands, instead of deleting it under them.
        let check = if first.cfg.composer.retire_verified && !stop.is_cancelled() { Some(records::check_and_retire(&first, state, &stop).await) } else { None };
        let windows_left_open = left_open_unknown(&first);
        let done = StreamDone { ctx: first, check, suspicions_at_stop: Vec::new(), windows_left_open };
        return Ok(Finished { elapsed: started.elapsed(), streams: vec![done], epochs, quiet, ended_early });
    }
    let mut streams = verify_all(ctxs).await;
    if streams.is_empty() {
        // The run stopped during a rotation: the last finished epoch is the end of it.
        streams = epochs.pop().map(|e| e.streams).unwrap_or_default();
    }
    Ok(Finished { elapsed: started.elapsed(), streams, epochs, quiet, ended_early })
}

/// When a run rotates its streams ([`crate::config::StreamConfig::rotate_after`]).
#[derive(Clone, Copy, Debug, Default)]
struct Rotation {
    after: Option<Duration>,
    messages: Option<u64>,
}

impl Rotation {
    fn of(cfg: &crate::config::Config) -> Self {
        let s = &cfg.stream;
        Self { after: Some(s.rotate_after).filter(|d| !d.is_zero()), messages: Some(s.rotate_messages).filter(|m| *m > 0) }
    }

    /// Resolves once the epoch begun at `since` has lasted long enough or one of its streams
    /// holds enough acks; never without either limit.
    async fn due(&self, ctxs: &[Arc<Ctx>], since: Instant) {
        if self.after.is_none() && self.messages.is_none() {
            return std::future::pending().await;
        }
        loop {
            let long = self.after.is_some_and(|a| since.elapsed() >= a);
            let full = self.messages.is_some_and(|m| ctxs.iter().any(|c| Stats::get(&c.stats.acked) >= m));
            if long || full {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The drivers of an epoch's streams: publisher, reader, monitor, durable consumer and
/// operator each, and a composer driver's record keeper.
fn spawn_drivers(ctxs: &[Arc<Ctx>], source: &Source, composer: Option<&StateDir>) -> tokio::task::JoinSet<anyhow::Result<()>> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, ctx) in ctxs.iter().enumerate() {
        drivers::spawn_core(ctx, &mut tasks);
        if ctx.cfg.durable.enabled {
            tasks.spawn(drivers::on_stream(ctx, drivers::durable::run(ctx.clone(), source.stream_chooser(Purpose::Durable, i))));
        }
        if ctx.cfg.operator.enabled && ctx.cluster.size > 1 {
            tasks.spawn(drivers::on_stream(ctx, operator::run(ctx.clone(), source.stream_chooser(Purpose::Operator, i))));
        }
        if let Some(state) = composer {
            tasks.spawn(drivers::on_stream(ctx, records::record_while_running(ctx.clone(), state.clone())));
        }
    }
    tasks
}

/// Every stream's final verification at once, with faults paused: each waits for its own
/// settle and read, and answers the suspicions its drivers left open.
async fn verify_all(ctxs: Vec<Arc<Ctx>>) -> Vec<StreamDone> {
    futures::future::join_all(ctxs.into_iter().map(|ctx| async move {
        let open = ctx.suspicions.take();
        if !open.is_empty() {
            tracing::info!(stream = %ctx.stream, ?open, "suspicions open when the drivers stopped: the final verification answers them");
        }
        let check = history::on_stream(ctx.stream.clone(), final_verification(&ctx, true, true)).await;
        let suspicions_at_stop = check.answer(open);
        let windows_left_open = history::on_stream(ctx.stream.clone(), async { left_open_unknown(&ctx) }).await;
        StreamDone { ctx, check: Some(check), suspicions_at_stop, windows_left_open }
    }))
    .await
}

/// Ends the drivers when the run's (or an epoch's) time is up: they finish what they had
/// open (see [`drivers::finish`]), within two liveness windows and a quiet part without
/// progress, with faults paused meanwhile when `quiet` (not for a composer driver, whose
/// windows ask for their own quiet while other drivers run).
async fn finish_drivers(ctxs: &[Arc<Ctx>], tasks: tokio::task::JoinSet<anyhow::Result<()>>, quiet: bool) -> anyhow::Result<()> {
    let Some(first) = ctxs.first() else { return drivers::join(tasks).await };
    let l = &first.cfg.liveness;
    let bound = 2 * l.window + l.quiet;
    if !quiet {
        return drivers::finish(ctxs, tasks, bound).await;
    }
    // Faults stay paused for as long as the drivers finish (a request per bound).
    let ask = || first.live.quiet.request(crate::faults::quiet::Why::FinalVerification, bound, "the run's time is up: the drivers finish what they have open");
    let _ = ask();
    let finishing = drivers::finish(ctxs, tasks, bound);
    tokio::pin!(finishing);
    loop {
        tokio::select! {
            r = &mut finishing => return r,
            _ = tokio::time::sleep(bound / 2) => { let _ = ask(); }
        }
    }
}

/// The liveness windows the run was stopped under (nothing decided them): each one's
/// property is unknown.
fn left_open_unknown(ctx: &Ctx) -> Vec<crate::context::retry::LeftOpen> {
    let left = ctx.live.take_left_open();
    for w in &left {
        history::unknown(w.property, &json!({ "stream": ctx.stream, "window_left_open": w,
            "problem": "the run ended while this liveness window was open, and nothing decided it" }));
    }
    left
}

/// Which setup: what failing to reach a healthy cluster means there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// `workload run` and `local`: failing is "could not be carried out".
    FirstContact,
    /// A composer driver starts under faults against a cluster the entrypoint already found
    /// ready: `cluster-eventually-healthy` fails for each window that runs out (reported),
    /// and it goes on trying until stopped.
    Composer,
    /// The streams of a run's next epoch: `cluster-eventually-healthy` fails once when one
    /// window runs out, and the run ends early.
    NextEpoch,
}

/// The cluster reached and ready, and the run's streams created.
async fn setup(ctxs: &[Arc<Ctx>], kind: Setup) -> Result<(), NotRun> {
    let first = kind == Setup::FirstContact;
    let once = |c: &Arc<Ctx>| Arc::new(c.with_cancel(&c.cancel, kind == Setup::NextEpoch));
    let ctx = &once(&ctxs[0]);
    let client = if first {
        first_contact(ctx).await.map_err(NotRun::Setup)?
    } else {
        if !verify::recovered(ctx, &ctx.cancel).await {
            return Err(NotRun::Stopped);
        }
        ctx.connect("setup").await.map_err(|_| NotRun::Stopped)?
    };
    let replicas = ctx.cfg.stream.initial_replicas.min(ctx.cluster.size).max(1);
    for ctx in ctxs.iter().map(once) {
        let config = jsapi::stream_config(&ctx.stream, &ctx.subject, replicas, ctx.cfg.stream.duplicate_window);
        let create = || jsapi::create_stream(&client, &config, ctx.api_timeout());
        if first {
            let window = ctx.cfg.liveness.window;
            ctx.live.attempt("create stream", &ctx.cancel, create).await.map_err(|e| NotRun::Setup(format!("cannot create the stream {} within {window:?}: {e}", ctx.stream)))?;
        } else if ctx.live.retry("create stream", Property::ClusterEventuallyHealthy, &ctx.cancel, create).await.is_none() {
            return Err(NotRun::Stopped);
        }
        ctx.stats.replicas.store(replicas as u64, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(stream = %ctx.stream, replicas, "stream created");
    }
    if first {
        let mut details = json!({ "stream": ctx.stream, "replicas": replicas, "servers": ctx.cluster.servers });
        if ctxs.len() > 1 {
            details["streams"] = json!(ctxs.iter().map(|c| &c.stream).collect::<Vec<_>>());
        }
        sdk::setup_complete(&details);
    }
    Ok(())
}

/// A progress line every `report.progress_interval` until `stop`: totals over the streams
/// (and the epochs before, when the run rotates them), and the slowest stream's when there
/// are several.
async fn progress(streams: Arc<Streams>, stop: CancellationToken, started: Instant) -> anyhow::Result<()> {
    let every = streams.first().cfg.report.progress_interval;
    let (mut acked0, mut verified0) = (0, 0);
    // Resident set at the first line and the largest since, kept in the current epoch's
    // first stream (an epoch's counters start at zero).
    let (mut rss_first, mut rss_max) = (0, 0);
    let mut persisting = crate::logs::Persisting::default();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(every) => {}
        }
        let ctxs = streams.now();
        let ctx = &ctxs[0];
        let total = |counter: fn(&Stats) -> &std::sync::atomic::AtomicU64| streams.total(|s| Stats::get(counter(s)));
        let (acked, verified) = (total(|s| &s.acked), total(|s| &s.verified));
        let s = &ctx.stats;
        let rss = rss_mib();
        if let Some(kib) = rss.map(|m| (m * 1024.0) as u64) {
            rss_first = if rss_first == 0 { kib } else { rss_first };
            rss_max = rss_max.max(kib);
            s.rss_kib_first.store(rss_first, std::sync::atomic::Ordering::Relaxed);
            s.rss_kib_max.store(rss_max, std::sync::atomic::Ordering::Relaxed);
        }
        let secs = every.as_secs_f64();
        let leader = s.leader.lock().map(|l| l.clone()).unwrap_or_default();
        let slowest = match slowest(&ctxs) {
            Some(c) if ctxs.len() > 1 => format!(" slowest={} acked={} lag={}", c.stream, Stats::get(&c.stats.acked), c.stats.lag()),
            _ => String::new(),
        };
        tracing::info!(
            "t={:.0}s acked={} ({:.0}/s) verified={} ({:.0}/s) lag={} replicas={} leader={} rewinds={} recreates={} scales={} faults={} quiet={} failed={} client_errors={} rss={}MiB{}{}",
            started.elapsed().as_secs_f64(),
            acked,
            (acked - acked0) as f64 / secs,
            verified,
            (verified - verified0) as f64 / secs,
            ctxs.iter().map(|c| c.stats.lag()).sum::<u64>(),
            Stats::get(&s.replicas),
            leader,
            total(|s| &s.rewinds),
            total(|s| &s.consumer_recreates),
            total(|s| &s.scale_requests),
            ctx.faults.as_ref().map_or(0, |f| f.starts()),
            ctx.live.quiet.count(),
            history::failures_so_far(),
            crate::logs::client_errors(),
            rss.map_or("?".into(), |m| format!("{m:.1}")),
            slowest,
            if ctx.run.run_id.contains("_e") { format!(" stream={}", ctx.stream) } else { String::new() },
        );
        (acked0, verified0) = (acked, verified);
        if let Some(streak) = persisting.look(Instant::now(), crate::logs::client_errors(), ctx.cfg.liveness.window) {
            tracing::warn!(last = crate::logs::last_client_error(), "the client has logged connection errors for {streak:.0?} without a break");
        }
    }
}

/// The stream with the fewest acks so far.
pub fn slowest(ctxs: &[Arc<Ctx>]) -> Option<&Arc<Ctx>> {
    ctxs.iter().min_by_key(|c| Stats::get(&c.stats.acked))
}

/// Resident set size of this process, from /proc.
pub fn rss_mib() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096.0 / (1024.0 * 1024.0))
}
