//! `workload bench`: the workload's own cost, measured side by side in one run against
//! one local 3-node cluster (R3 streams, `sync_interval: always`).
//!
//! 1. publish, at every depth (acks in flight): three sides in rotating order each round:
//!    a plain async-nats loop (same payload size, no headers), the same loop sending what
//!    the workload sends per message (`Nats-Msg-Id`, the expected last sequence, a 64-hex
//!    checksum header) without any check, and the workload's publisher (ledger, regenerated
//!    payloads, sha256). checked / raw-with-headers is the workload's own cost;
//!    raw-with-headers / raw is what deduplication and the sequence check cost the server;
//! 2. read: a plain ordered consumer against the workload's verifying reader over the same
//!    stream of workload messages (a million by default);
//! 3. CPU time of this process per 1 000 messages, for every side;
//! 4. memory: RSS of the whole workload after 100 k and 1 M verified messages;
//! 5. detection: time from deleting an acknowledged message to the failing property;
//! 6. streams: `workload run`'s own path with 1, 2, 4, 8 streams (operator off): acks per
//!    second in total and of the slowest stream, CPU per 1 000 acks, RSS; beside it, as many
//!    raw-with-headers loops at once, each on its own stream, for as long.

use crate::history;
use crate::cluster::LocalCluster;
use crate::config::Config;
use crate::drivers::{self, publisher, reader};
use crate::faults::QuietRequests;
use crate::nats::jsapi;
use crate::random::Source;
use crate::run::{self, names, rss_mib, RunSpec};
use crate::context::state::{ClusterAddr, Ctx, Stats};
use crate::nats::jsapi::connect;
use async_nats::jetstream::{self, consumer::pull::OrderedConfig, message::PublishMessage};
use bytes::Bytes;
use futures::StreamExt;
use properties::payload::{RunMessages, CHECKSUM_HEADER};
use properties::Property;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct BenchSpec {
    /// Messages per publish measurement at 16 in flight; a fifth of it one at a time, and
    /// more at deeper windows (see [`BenchSpec::publish_count`]).
    pub messages: u64,
    /// Acks in flight to measure the publish sides at.
    pub depths: Vec<usize>,
    /// Messages per read measurement.
    pub read_messages: u64,
    pub rounds: usize,
    /// Verified-message marks at which RSS is sampled.
    pub memory_marks: Vec<u64>,
    pub detection_tries: usize,
    /// Stream counts for the scaling table, and how long each run drives.
    pub stream_counts: Vec<usize>,
    pub streams_for: Duration,
    pub cfg: Config,
}

impl BenchSpec {
    pub fn full(cfg: Config) -> Self {
        Self {
            messages: 80_000,
            depths: vec![1, 16, 64, 256],
            read_messages: 1_000_000,
            rounds: 5,
            memory_marks: vec![100_000, 1_000_000],
            detection_tries: 5,
            stream_counts: vec![1, 2, 4, 8],
            streams_for: Duration::from_secs(30),
            cfg,
        }
    }

    /// Seconds, not minutes: proves the benchmark produces every number.
    pub fn smoke(mut cfg: Config) -> Self {
        cfg.liveness.quiet = Duration::from_secs(3);
        cfg.liveness.window = Duration::from_secs(20);
        Self {
            messages: 1_000,
            depths: vec![1, 16],
            read_messages: 2_000,
            rounds: 1,
            memory_marks: vec![2_000, 5_000],
            detection_tries: 1,
            stream_counts: vec![1, 2],
            streams_for: Duration::from_secs(5),
            cfg,
        }
    }

    /// Messages per publish measurement at `depth`: about as long at every depth (deeper
    /// windows go faster; one at a time, about eight times slower than 16).
    fn publish_count(&self, depth: usize) -> u64 {
        match depth {
            1 => (self.messages / 8).max(1),
            d if d < 64 => self.messages,
            d if d < 256 => self.messages * 2,
            _ => self.messages * 3,
        }
    }
}

/// The three publish sides.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    Raw,
    RawHeaders,
    Checked,
}

const SIDES: [Side; 3] = [Side::Raw, Side::RawHeaders, Side::Checked];

/// One measurement: messages per second, and this process's CPU per 1 000 messages.
#[derive(Clone, Copy, Debug)]
struct Sample {
    per_s: f64,
    cpu_ms_per_1000: f64,
}

/// Times `n` messages' worth of work: wall clock and this process's CPU time.
struct Timer {
    wall: Instant,
    cpu: f64,
}

impl Timer {
    fn start() -> Timer {
        Timer { wall: Instant::now(), cpu: cpu_seconds() }
    }

    fn sample(&self, n: u64) -> Sample {
        let cpu = cpu_seconds() - self.cpu;
        Sample { per_s: n as f64 / self.wall.elapsed().as_secs_f64(), cpu_ms_per_1000: cpu * 1e6 / n.max(1) as f64 }
    }
}

/// User and system CPU time of this process so far, in seconds.
fn cpu_seconds() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    getrusage(UsageWho::RUSAGE_SELF).map_or(f64::NAN, |u| secs(u.user_time()) + secs(u.system_time()))
}

struct Bench {
    spec: BenchSpec,
    servers: Vec<String>,
    monitor_urls: Vec<String>,
    client: async_nats::Client,
    streams: u64,
}

pub async fn run(spec: BenchSpec, server_bin: &Path, dir: &Path) -> anyhow::Result<Value> {
    let _ = std::fs::remove_dir_all(dir.join("cluster"));
    let cluster = LocalCluster::launch(server_bin, 3, &dir.join("cluster"), false, Duration::from_secs(60)).await?;
    let client = connect(&cluster.client_urls(), "bench").await?;
    let mut b = Bench { spec, servers: cluster.client_urls(), monitor_urls: cluster.monitor_urls(), client, streams: 0 };

    let mut publish = json!({});
    for depth in b.spec.depths.clone() {
        let mut samples: [Vec<Sample>; 3] = Default::default();
        for round in 0..b.spec.rounds {
            // Each side goes first, second and third in turn, so drift hits all three.
            for k in 0..SIDES.len() {
                let i = (round + k) % SIDES.len();
                samples[i].push(b.publish(SIDES[i], depth).await?);
            }
        }
        let [raw, headers, checked] = &samples;
        publish[format!("in_flight_{depth}")] = json!({
            "messages": b.spec.publish_count(depth),
            "raw": summary(raw),
            "raw_headers": summary(headers),
            "checked": summary(checked),
            "checked_vs_raw_headers": ratio(checked, headers),
            "checked_vs_raw_headers_spread": spread(checked, headers),
            "raw_headers_vs_raw": ratio(headers, raw),
            "checked_vs_raw": ratio(checked, raw),
        });
    }

    // One stream of workload messages, read by both sides in turn.
    let deepest = b.spec.depths.iter().copied().max().unwrap_or(16);
    let (_, source) = b.checked_publish(deepest, b.spec.read_messages).await?;
    let (mut raw, mut checked) = (Vec::new(), Vec::new());
    for round in 0..b.spec.rounds {
        if round % 2 == 0 {
            raw.push(b.raw_read(&source.stream).await?);
            checked.push(b.checked_read(&source).await?);
        } else {
            checked.push(b.checked_read(&source).await?);
            raw.push(b.raw_read(&source.stream).await?);
        }
    }
    let read = json!({ "messages": b.spec.read_messages, "raw": summary(&raw), "checked": summary(&checked), "checked_vs_raw": ratio(&checked, &raw), "checked_vs_raw_spread": spread(&checked, &raw) });
    let memory = b.memory().await?;
    let detection = b.detection().await?;
    let streams = b.streams().await?;
    Ok(json!({
        "payload_size": b.spec.cfg.publish.payload_size,
        "rounds": b.spec.rounds,
        "publish": publish,
        "read": read,
        "memory": memory,
        "detection": detection,
        "streams": streams,
    }))
}

/// Medians of a side's samples, and the samples.
fn summary(xs: &[Sample]) -> Value {
    json!({
        "per_s": median(xs.iter().map(|s| s.per_s)).round(),
        "cpu_ms_per_1000": (median(xs.iter().map(|s| s.cpu_ms_per_1000)) * 10.0).round() / 10.0,
        "samples_per_s": xs.iter().map(|s| s.per_s.round()).collect::<Vec<_>>(),
    })
}

/// The median of the per-round ratios of `a` over `b` (sample i of each side was taken in
/// round i, back to back): pairing cancels the drift between rounds of an fsync-bound
/// machine, which moves single rounds by a third, so the ratio is steadier than one of
/// medians.
fn ratio(a: &[Sample], b: &[Sample]) -> f64 {
    three_places(median(paired(a, b).into_iter()))
}

fn three_places(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Each round's ratio of `a` over `b`.
fn paired(a: &[Sample], b: &[Sample]) -> Vec<f64> {
    a.iter().zip(b).map(|(a, b)| a.per_s / b.per_s).collect()
}

/// The spread of the per-round ratios, lowest and highest, to three places.
fn spread(a: &[Sample], b: &[Sample]) -> Value {
    let r = paired(a, b);
    json!([three_places(r.iter().copied().fold(f64::INFINITY, f64::min)), three_places(r.iter().copied().fold(f64::NEG_INFINITY, f64::max))])
}

fn median(xs: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = xs.collect();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
}

impl Bench {
    /// A fresh R3 stream and a context for the workload's drivers on it.
    async fn new_stream(&mut self, cfg: Config) -> anyhow::Result<Arc<Ctx>> {
        self.streams += 1;
        let run_id = format!("bench{}_{}", std::process::id(), self.streams);
        let (stream, subject) = names(&run_id);
        let config = jsapi::stream_config(&stream, &subject, 3, cfg.stream.duplicate_window);
        let run = RunMessages::new(&run_id, self.streams, cfg.publish.payload_size);
        let ctx = Ctx::new(&cfg, &self.cluster(), run, Instant::now(), QuietRequests::default(), CancellationToken::new());
        // A cluster just launched may not yet have every peer in its meta group ("no
        // suitable peers for placement"): retried within a liveness window, as `local` does.
        let create = || jsapi::create_stream(&self.client, &config, Duration::from_secs(10));
        ctx.live.attempt("create stream", &ctx.cancel, create).await.map_err(|e| anyhow::anyhow!("cannot create the bench stream {stream}: {e}"))?;
        // The create is answered before the stream's group has elected a leader; a raw loop
        // publishing at once would meet "no responders", which it does not retry.
        let led = || jsapi::stream_leader(&self.client, &stream, Duration::from_secs(5));
        ctx.live.attempt("stream leader", &ctx.cancel, led).await.map_err(|e| anyhow::anyhow!("the bench stream {stream} has no leader: {e}"))?;
        Ok(Arc::new(ctx.with_cancel(&ctx.cancel, true)))
    }

    fn cluster(&self) -> ClusterAddr {
        ClusterAddr { servers: self.servers.clone(), monitor_urls: self.monitor_urls.clone(), size: 3 }
    }

    async fn publish(&mut self, side: Side, depth: usize) -> anyhow::Result<Sample> {
        let n = self.spec.publish_count(depth);
        match side {
            Side::Checked => Ok(self.checked_publish(depth, n).await?.0),
            raw => self.raw_publish(depth, n, raw == Side::RawHeaders).await,
        }
    }

    /// A plain publish loop keeping `depth` acks in flight; with `headers`, every message
    /// carries what the workload's does (its own id, the expected last sequence, a checksum
    /// header of the same length), computed by nobody and checked by nobody. Like every
    /// side, it runs as a task of its own, as the workload's drivers do (the benchmark's
    /// own future runs on the runtime's blocking thread, where every wake-up costs more).
    async fn raw_publish(&mut self, depth: usize, n: u64, headers: bool) -> anyhow::Result<Sample> {
        let (ctx, js) = self.raw_stream().await?;
        spawned(async move {
            let timer = Timer::start();
            raw_loop(&ctx, &js, depth, n, None, headers).await?;
            Ok(timer.sample(n))
        })
        .await
    }

    /// A fresh stream and a plain JetStream context of its own for a raw loop.
    async fn raw_stream(&mut self) -> anyhow::Result<(Arc<Ctx>, jetstream::Context)> {
        let ctx = self.new_stream(self.spec.cfg.clone()).await?;
        let js = jetstream::ContextBuilder::new().timeout(ctx.cfg.publish.ack_timeout).build(ctx.connect("raw").await?);
        // The leader's interest in the subject reaches this connection's server over a route
        // a moment after the election; a raw loop does not retry "no responders" (failed CI
        // once), so it starts only once the stream answers this connection.
        let answers = || jsapi::stream_answers(&js, &ctx.subject);
        ctx.live.attempt("stream answers", &ctx.cancel, answers).await.map_err(|e| anyhow::anyhow!("the bench stream {} does not answer: {e}", ctx.stream))?;
        Ok((ctx, js))
    }

    /// The workload's publisher until it has `n` acks; its sample and context.
    async fn checked_publish(&mut self, depth: usize, n: u64) -> anyhow::Result<(Sample, Arc<Ctx>)> {
        let mut cfg = self.spec.cfg.clone();
        cfg.publish.in_flight = depth;
        let ctx = self.new_stream(cfg).await?;
        let timer = Timer::start();
        let task = tokio::spawn(publisher::run(ctx.clone()));
        until(&ctx.stats.acked, n, &ctx.cancel).await;
        let sample = timer.sample(Stats::get(&ctx.stats.acked));
        ctx.cancel.cancel();
        task.await??;
        Ok((sample, ctx))
    }

    async fn raw_read(&self, stream: &str) -> anyhow::Result<Sample> {
        let js = jetstream::new(connect(&self.servers, "raw-reader").await?);
        let consumer = js.get_stream_no_info(stream).await?.create_consumer(OrderedConfig::default()).await?;
        let n = self.spec.read_messages;
        spawned(async move {
            let mut messages = consumer.messages().await?;
            let timer = Timer::start();
            for _ in 0..n {
                messages.next().await.ok_or_else(|| anyhow::anyhow!("stream ended"))??;
            }
            Ok(timer.sample(n))
        })
        .await
    }

    async fn checked_read(&self, ctx: &Arc<Ctx>) -> anyhow::Result<Sample> {
        let ctx = ctx.with_cancel(&CancellationToken::new(), true); // the publisher's is cancelled
        let n = self.spec.read_messages;
        spawned(async move {
            let verified = AtomicU64::new(0);
            let timer = Timer::start();
            reader::read(&ctx, reader::Until::Seq(n), &verified).await?;
            Ok(timer.sample(Stats::get(&verified)))
        })
        .await
    }

    /// Publisher, reader and monitor together; RSS when the reader passes each mark.
    async fn memory(&mut self) -> anyhow::Result<Value> {
        let ctx = self.new_stream(self.spec.cfg.clone()).await?;
        let started = Instant::now();
        let mut tasks = JoinSet::new();
        drivers::spawn_core(&ctx, &mut tasks);
        let mut samples = Vec::new();
        for &mark in &self.spec.memory_marks {
            until(&ctx.stats.verified, mark, &ctx.cancel).await;
            samples.push(json!({ "verified": Stats::get(&ctx.stats.verified), "rss_mib": rss_mib(), "elapsed_s": started.elapsed().as_secs_f64() }));
        }
        drivers::stop(&ctx, tasks).await?;
        Ok(json!({ "samples": samples, "peak_rss_mib": peak_rss_mib() }))
    }

    /// Deletes an acknowledged message from the middle of a running workload's stream and
    /// times how long until a property fails. Confirmation (liveness.quiet) bounds it.
    async fn detection(&mut self) -> anyhow::Result<Value> {
        let mut times = Vec::new();
        for _ in 0..self.spec.detection_tries {
            let ctx = self.new_stream(self.spec.cfg.clone()).await?;
            let mut tasks = JoinSet::new();
            drivers::spawn_core(&ctx, &mut tasks);
            until(&ctx.stats.acked, 2_000, &ctx.cancel).await;
            let watched = [Property::AckedMessageNeverLost, Property::StreamStateCoversAcks, Property::ReadSequenceGapFree];
            let before: u64 = watched.iter().map(|p| history::counts(*p).failed).sum();
            let seq = Stats::get(&ctx.stats.last_acked_seq) / 2;
            let deleted = Instant::now(); // the server may apply it before its reply reaches us
            jsapi::request(&self.client, &format!("STREAM.MSG.DELETE.{}", ctx.stream), &json!({ "seq": seq }), Duration::from_secs(5)).await?;
            let limit = ctx.cfg.liveness.window * 2;
            while watched.iter().map(|p| history::counts(*p).failed).sum::<u64>() == before && deleted.elapsed() < limit {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if deleted.elapsed() < limit {
                times.push(deleted.elapsed().as_secs_f64());
            }
            drivers::stop(&ctx, tasks).await?;
        }
        Ok(json!({ "median_s": median(times.iter().copied()), "samples_s": times, "confirmation_hold_s": self.spec.cfg.liveness.quiet.as_secs_f64() }))
    }

    /// `workload run`'s own path with N streams at once, the operator and faults off: acks
    /// per second of driving in total and of the slowest stream, CPU per 1 000 acks, RSS.
    async fn streams(&mut self) -> anyhow::Result<Value> {
        let mut rows = Vec::new();
        for n in self.spec.stream_counts.clone() {
            let mut cfg = self.spec.cfg.clone();
            (cfg.stream.count, cfg.stream.initial_replicas, cfg.operator.enabled, cfg.faults.enabled) = (n, 3, false, false);
            self.streams += 1;
            let run_id = format!("bench{}_{}_n{n}", std::process::id(), self.streams);
            let duration = self.spec.streams_for;
            let spec = RunSpec { cfg, cluster: self.cluster(), seed: self.streams, source: Source::Seeded(self.streams), run_id, duration, injector: None, known_faults: None, composer: None, timeline: None, out: None };
            let timer = Timer::start();
            let finished = run::run(spec, CancellationToken::new()).await.map_err(|e| anyhow::anyhow!("{n} streams: {e}"))?;
            let cpu = cpu_seconds() - timer.cpu;
            let acked: Vec<u64> = finished.streams.iter().map(|s| Stats::get(&s.ctx.stats.acked)).collect();
            let verified: u64 = finished.streams.iter().map(|s| s.check.as_ref().map_or(0, |c| c.verified)).sum();
            let total: u64 = acked.iter().sum();
            let secs = duration.as_secs_f64();
            let all_held = finished.streams.iter().all(|s| s.check.as_ref().is_some_and(|c| c.all_held()));
            let raw = self.raw_headers_streams(n, duration).await?;
            rows.push(json!({
                "streams": n,
                "raw_headers_acked_per_s": (raw as f64 / secs).round(),
                "checked_vs_raw_headers": ((total as f64 / raw.max(1) as f64) * 1000.0).round() / 1000.0,
                "acked_per_s": (total as f64 / secs).round(),
                "slowest_acked_per_s": (acked.iter().copied().min().unwrap_or(0) as f64 / secs).round(),
                "cpu_ms_per_1000": (cpu * 1e6 / total.max(1) as f64 * 10.0).round() / 10.0,
                "rss_mib": rss_mib(),
                "final_check_held": all_held,
                "final_verified": verified,
            }));
        }
        Ok(json!(rows))
    }

    /// `n` raw-with-headers loops at once, each on its own stream at the workload's depth,
    /// for `lasting`: their acks in total (the streams table's other side).
    async fn raw_headers_streams(&mut self, n: usize, lasting: Duration) -> anyhow::Result<u64> {
        let depth = self.spec.cfg.publish.in_flight;
        let mut loops = JoinSet::new();
        let mut ready = Vec::new();
        for _ in 0..n {
            ready.push(self.raw_stream().await?);
        }
        let deadline = Instant::now() + lasting;
        for (ctx, js) in ready {
            loops.spawn(async move { raw_loop(&ctx, &js, depth, u64::MAX, Some(deadline), true).await });
        }
        let mut total = 0;
        while let Some(acked) = loops.join_next().await {
            total += acked??;
        }
        Ok(total)
    }
}

/// Publishes on `ctx`'s stream with `depth` acks in flight until `n` are acked or
/// `deadline` passes; the acks. With `headers`, every message carries what the workload's
/// does (its own id, the expected last sequence, a checksum header of the same length),
/// computed by nobody and checked by nobody.
async fn raw_loop(ctx: &Ctx, js: &jetstream::Context, depth: usize, n: u64, deadline: Option<Instant>, headers: bool) -> anyhow::Result<u64> {
    let payload = Bytes::from(vec![b'x'; ctx.cfg.publish.payload_size]);
    let sum = "0".repeat(64);
    let (mut in_air, mut sent, mut acked) = (VecDeque::new(), 0u64, 0);
    while acked < n {
        let open = deadline.is_none_or(|d| Instant::now() < d);
        while open && in_air.len() < depth && sent < n {
            sent += 1;
            let ack = if headers {
                let msg = PublishMessage::build()
                    .message_id(ctx.run.msg_id(sent))
                    .expected_last_sequence(sent - 1)
                    .header(CHECKSUM_HEADER, sum.as_str())
                    .payload(payload.clone());
                js.send_publish(ctx.subject.clone(), msg).await?
            } else {
                js.publish(ctx.subject.clone(), payload.clone()).await?
            };
            in_air.push_back(ack);
        }
        match in_air.pop_front() {
            Some(ack) => {
                ack.await?;
                acked += 1;
            }
            None => break,
        }
    }
    Ok(acked)
}

/// `f` run as a task of its own, awaited.
async fn spawned<T: Send + 'static>(f: impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static) -> anyhow::Result<T> {
    tokio::spawn(f).await?
}

/// Waits until `counter` reaches `n` (or the token is cancelled).
async fn until(counter: &AtomicU64, n: u64, cancel: &CancellationToken) {
    while Stats::get(counter) < n && !cancel.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The process's peak resident set (VmHWM), from /proc.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// A human table of the results.
pub fn print(r: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!("\npublish: msg/s (CPU ms per 1000 msgs of this process)");
    // A ratio with the lowest and highest of its rounds.
    let with_spread = |v: &Value, k: &str| format!("{:.3} ({:.2}-{:.2})", f(&v[k]), f(&v[format!("{k}_spread")][0]), f(&v[format!("{k}_spread")][1]));
    println!("{:>9} {:>16} {:>16} {:>16} {:>20} {:>9}", "in flight", "raw", "raw+headers", "checked", "checked/hdrs", "hdrs/raw");
    // By depth, not by key (a JSON object's keys sort as text: 1, 16, 256, 64).
    let mut depths: Vec<(&String, &Value)> = r["publish"].as_object().into_iter().flatten().collect();
    depths.sort_by_key(|(k, _)| k.trim_start_matches("in_flight_").parse::<u64>().unwrap_or(u64::MAX));
    for (k, v) in depths {
        let side = |s: &str| format!("{:.0} ({:.1})", f(&v[s]["per_s"]), f(&v[s]["cpu_ms_per_1000"]));
        println!(
            "{:>9} {:>16} {:>16} {:>16} {:>20} {:>9.3}",
            k.trim_start_matches("in_flight_"),
            side("raw"),
            side("raw_headers"),
            side("checked"),
            with_spread(v, "checked_vs_raw_headers"),
            f(&v["raw_headers_vs_raw"])
        );
    }
    let read = &r["read"];
    println!(
        "read {} msgs: raw {:.0}/s ({:.1} ms CPU/1000), checked {:.0}/s ({:.1}), ratio {}",
        read["messages"], f(&read["raw"]["per_s"]), f(&read["raw"]["cpu_ms_per_1000"]), f(&read["checked"]["per_s"]), f(&read["checked"]["cpu_ms_per_1000"]), with_spread(read, "checked_vs_raw")
    );
    for s in r["memory"]["samples"].as_array().into_iter().flatten() {
        println!("rss after {:>9} verified: {:.1} MiB", s["verified"], f(&s["rss_mib"]));
    }
    println!("peak rss: {:.1} MiB", f(&r["memory"]["peak_rss_mib"]));
    println!("detection of a deleted acked message: median {:.1} s over {} (confirmation hold {} s)",
        f(&r["detection"]["median_s"]), r["detection"]["samples_s"], r["detection"]["confirmation_hold_s"]);
    println!("{:>7} {:>14} {:>10} {:>8} {:>14} {:>12} {:>9} {:>6}", "streams", "raw+headers/s", "acked/s", "ratio", "slowest/s", "CPU ms/1000", "RSS MiB", "held");
    for row in r["streams"].as_array().into_iter().flatten() {
        println!(
            "{:>7} {:>14.0} {:>10.0} {:>8.3} {:>14.0} {:>12.1} {:>9.1} {:>6}",
            row["streams"],
            f(&row["raw_headers_acked_per_s"]),
            f(&row["acked_per_s"]),
            f(&row["checked_vs_raw_headers"]),
            f(&row["slowest_acked_per_s"]),
            f(&row["cpu_ms_per_1000"]),
            f(&row["rss_mib"]),
            row["final_check_held"]
        );
    }
}
