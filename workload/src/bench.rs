//! `workload bench`: the workload's own cost, measured side by side in one run against
//! one local 3-node cluster (R3 streams, `sync_interval: always`).
//!
//! 1. publish: a plain async-nats loop (same payload size, same acks in flight, no checks)
//!    against the workload's publisher (ids, expected sequences, checksums, ledger), one at
//!    a time and with the in-flight window; rounds alternate which side goes first;
//! 2. read: a plain ordered consumer against the workload's verifying reader, same stream;
//! 3. memory: RSS of the whole workload after 100 k and 1 M verified messages;
//! 4. detection: time from deleting an acknowledged message to the failing property.

use crate::cluster::LocalCluster;
use crate::config::Config;
use crate::drivers::{self, publisher, reader};
use crate::faults::QuietRequests;
use crate::jsapi;
use crate::run::{names, rss_mib};
use crate::sdk;
use crate::state::{connect, ClusterAddr, Ctx, Stats};
use async_nats::jetstream::{self, consumer::pull::OrderedConfig};
use bytes::Bytes;
use futures::StreamExt;
use properties::payload::RunMessages;
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
    /// Messages per publish/read measurement with the in-flight window (a fifth of it one
    /// at a time, which is about ten times slower).
    pub messages: u64,
    pub rounds: usize,
    /// Verified-message marks at which RSS is sampled.
    pub memory_marks: Vec<u64>,
    pub detection_tries: usize,
    pub cfg: Config,
}

impl BenchSpec {
    pub fn full(cfg: Config) -> Self {
        Self { messages: 20_000, rounds: 3, memory_marks: vec![100_000, 1_000_000], detection_tries: 5, cfg }
    }

    /// Seconds, not minutes: proves the benchmark produces numbers.
    pub fn smoke(mut cfg: Config) -> Self {
        cfg.liveness.quiet = Duration::from_secs(3);
        cfg.liveness.window = Duration::from_secs(20);
        Self { messages: 1_000, rounds: 1, memory_marks: vec![2_000, 5_000], detection_tries: 1, cfg }
    }
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
    let window = b.spec.cfg.publish.in_flight;

    let mut publish = json!({});
    for in_flight in [1, window] {
        let (mut raw, mut checked) = (Vec::new(), Vec::new());
        for round in 0..b.spec.rounds {
            // Alternate the order so drift in the machine hits both sides.
            if round % 2 == 0 {
                raw.push(b.raw_publish(in_flight).await?);
                checked.push(b.checked_publish(in_flight).await?.0);
            } else {
                checked.push(b.checked_publish(in_flight).await?.0);
                raw.push(b.raw_publish(in_flight).await?);
            }
        }
        publish[format!("in_flight_{in_flight}")] = compare(&raw, &checked);
    }

    let (mut raw, mut checked) = (Vec::new(), Vec::new());
    for round in 0..b.spec.rounds {
        let (_, ctx) = b.checked_publish(window).await?; // a stream of workload messages
        if round % 2 == 0 {
            raw.push(b.raw_read(&ctx.stream).await?);
            checked.push(b.checked_read(&ctx).await?);
        } else {
            checked.push(b.checked_read(&ctx).await?);
            raw.push(b.raw_read(&ctx.stream).await?);
        }
    }
    let read = compare(&raw, &checked);
    let memory = b.memory().await?;
    let detection = b.detection().await?;
    Ok(json!({
        "messages_per_measurement": b.spec.messages,
        "rounds": b.spec.rounds,
        "payload_size": b.spec.cfg.publish.payload_size,
        "in_flight": window,
        "publish": publish,
        "read": read,
        "memory": memory,
        "detection": detection,
    }))
}

/// Medians of both sides in messages/s and their ratio (checked / raw).
fn compare(raw: &[f64], checked: &[f64]) -> Value {
    let (r, c) = (median(raw), median(checked));
    json!({ "raw_per_s": r.round(), "checked_per_s": c.round(), "ratio": (c / r * 1000.0).round() / 1000.0,
            "raw_samples": raw.iter().map(|x| x.round()).collect::<Vec<_>>(),
            "checked_samples": checked.iter().map(|x| x.round()).collect::<Vec<_>>() })
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
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
        jsapi::create_stream(&self.client, &config, Duration::from_secs(10)).await?;
        let cluster = ClusterAddr { servers: self.servers.clone(), monitor_urls: self.monitor_urls.clone(), size: 3 };
        let run = RunMessages::new(&run_id, self.streams, cfg.publish.payload_size);
        let ctx = Ctx::new(&cfg, &cluster, run, Instant::now(), QuietRequests::default(), CancellationToken::new());
        Ok(Arc::new(ctx.with_cancel(&ctx.cancel, true)))
    }

    fn publish_count(&self, in_flight: usize) -> u64 {
        if in_flight == 1 { (self.spec.messages / 5).max(1) } else { self.spec.messages }
    }

    async fn raw_publish(&mut self, in_flight: usize) -> anyhow::Result<f64> {
        let ctx = self.new_stream(self.spec.cfg.clone()).await?;
        let js = jetstream::ContextBuilder::new().timeout(ctx.cfg.publish.ack_timeout).build(ctx.connect("raw").await?);
        let payload = Bytes::from(vec![b'x'; ctx.cfg.publish.payload_size]);
        let (n, started) = (self.publish_count(in_flight), Instant::now());
        let (mut in_air, mut sent, mut acked) = (VecDeque::new(), 0, 0);
        while acked < n {
            while in_air.len() < in_flight && sent < n {
                in_air.push_back(js.publish(ctx.subject.clone(), payload.clone()).await?);
                sent += 1;
            }
            if let Some(ack) = in_air.pop_front() {
                ack.await?;
                acked += 1;
            }
        }
        Ok(n as f64 / started.elapsed().as_secs_f64())
    }

    /// The workload's publisher until it has `messages` acks; returns its rate and context.
    async fn checked_publish(&mut self, in_flight: usize) -> anyhow::Result<(f64, Arc<Ctx>)> {
        let mut cfg = self.spec.cfg.clone();
        cfg.publish.in_flight = in_flight;
        let ctx = self.new_stream(cfg).await?;
        let started = Instant::now();
        let task = tokio::spawn(publisher::run(ctx.clone()));
        until(&ctx.stats.acked, self.publish_count(in_flight), &ctx.cancel).await;
        let rate = Stats::get(&ctx.stats.acked) as f64 / started.elapsed().as_secs_f64();
        ctx.cancel.cancel();
        task.await??;
        Ok((rate, ctx))
    }

    async fn raw_read(&self, stream: &str) -> anyhow::Result<f64> {
        let js = jetstream::new(connect(&self.servers, "raw-reader").await?);
        let consumer = js.get_stream_no_info(stream).await?.create_consumer(OrderedConfig::default()).await?;
        let mut messages = consumer.messages().await?;
        let (n, started) = (self.spec.messages, Instant::now());
        for _ in 0..n {
            messages.next().await.ok_or_else(|| anyhow::anyhow!("stream ended"))??;
        }
        Ok(n as f64 / started.elapsed().as_secs_f64())
    }

    async fn checked_read(&self, ctx: &Arc<Ctx>) -> anyhow::Result<f64> {
        let ctx = ctx.with_cancel(&CancellationToken::new(), true); // the publisher's is cancelled
        let verified = AtomicU64::new(0);
        let started = Instant::now();
        reader::read(&ctx, reader::Until::Seq(self.spec.messages), &verified).await?;
        Ok(Stats::get(&verified) as f64 / started.elapsed().as_secs_f64())
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
            let before: u64 = watched.iter().map(|p| sdk::counts(*p).failed).sum();
            let seq = Stats::get(&ctx.stats.last_acked_seq) / 2;
            let deleted = Instant::now(); // the server may apply it before its reply reaches us
            jsapi::request(&self.client, &format!("STREAM.MSG.DELETE.{}", ctx.stream), &json!({ "seq": seq }), Duration::from_secs(5)).await?;
            let limit = ctx.cfg.liveness.window * 2;
            while watched.iter().map(|p| sdk::counts(*p).failed).sum::<u64>() == before && deleted.elapsed() < limit {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if deleted.elapsed() < limit {
                times.push(deleted.elapsed().as_secs_f64());
            }
            drivers::stop(&ctx, tasks).await?;
        }
        Ok(json!({ "median_s": median(&times), "samples_s": times, "confirmation_hold_s": self.spec.cfg.liveness.quiet.as_secs_f64() }))
    }
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
    println!("\n{:<28} {:>12} {:>12} {:>8}", "measurement", "raw msg/s", "checked", "ratio");
    let row = |name: &str, v: &Value| {
        let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        println!("{:<28} {:>12.0} {:>12.0} {:>8.3}", name, f("raw_per_s"), f("checked_per_s"), f("ratio"));
    };
    for (k, v) in r["publish"].as_object().into_iter().flatten() {
        row(&format!("publish {k}"), v);
    }
    row("read (ordered consumer)", &r["read"]);
    for s in r["memory"]["samples"].as_array().into_iter().flatten() {
        println!("rss after {:>9} verified: {:.1} MiB", s["verified"], s["rss_mib"].as_f64().unwrap_or(f64::NAN));
    }
    println!("peak rss: {:.1} MiB", r["memory"]["peak_rss_mib"].as_f64().unwrap_or(f64::NAN));
    println!("detection of a deleted acked message: median {:.1} s over {} (confirmation hold {} s)",
        r["detection"]["median_s"].as_f64().unwrap_or(f64::NAN), r["detection"]["samples_s"], r["detection"]["confirmation_hold_s"]);
}
