//! Where does a new ephemeral consumer go while one of its stream's peers is still
//! catching the stream up, and what does it answer from there? No faults.
//!
//! Per trial: a fresh `--nodes`-node cluster; stream `S` (`--from` replicas, file) on
//! subject `s`, filled with `--backlog` messages of `--size` bytes (so that a new peer takes
//! seconds to copy it). Then the stream is scaled to `--up` replicas (a new peer starts
//! copying from sequence 1) and, with `--down`, `--down-after-ms` later scaled to that
//! count while the copy goes on (the workload's soak: R2 → R1 with one peer filling). From
//! the first scale on, a publisher adds a message every 10 ms, and every `--every-ms` a new
//! ephemeral consumer is created as the workload's ordered reader creates one (R1, memory
//! storage, no acks, from the message after the last acknowledged one, `--behind` back),
//! for `--probe` seconds; each answers its leader, `num_pending` and `delivered`, set beside
//! the stream's peers (`current`, `lag`) asked just before. A consumer is *stale* when it
//! reports fewer messages pending than the stream held past its start sequence when it was
//! created (it sees a stream that ends earlier than what was acknowledged); it is kept and
//! asked again each round until it counts what it was owed (`stale_for_s`). A trial *shows
//! it* when any consumer was stale.

use clap::Parser;
use findings::{api, stream_config, Cluster};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ID: &str = "consumer-placed-on-a-filling-peer";

/// Where does a new ephemeral consumer go while one of its stream's peers is still catching the stream up, and what does it answer from there? No faults.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trials: findings::Trials,
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// The stream's replicas before the scales.
    #[arg(long, default_value_t = 1)]
    from: usize,
    /// Replicas of the first scale (a peer that copies the stream from the start).
    #[arg(long, default_value_t = 2)]
    up: usize,
    /// Replicas of a second scale while that peer fills (none: no second scale).
    #[arg(long)]
    down: Option<usize>,
    /// Milliseconds between the two scales.
    #[arg(long, default_value_t = 500)]
    down_after_ms: u64,
    /// Messages in the stream before the scales.
    #[arg(long, default_value_t = 200_000)]
    backlog: u64,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Seconds of consumer creation after the first scale.
    #[arg(long, default_value_t = 15)]
    probe: u64,
    /// Milliseconds between consumer creations.
    #[arg(long, default_value_t = 500)]
    every_ms: u64,
    /// How far behind the last acknowledged message each consumer starts.
    #[arg(long, default_value_t = 1000)]
    behind: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let args = &args;
    args.trials.run(ID, |dir| async move {
        let details = run_trial(args, &dir).await?;
        Ok((details["stale"].as_u64().unwrap_or(0) > 0, details))
    })
    .await
}

async fn run_trial(args: &Args, dir: &std::path::Path) -> anyhow::Result<Value> {
    let cluster = Cluster::start(&args.trials.server, args.nodes, dir, false).await?;
    let client = async_nats::ConnectOptions::new().connect(cluster.urls()).await?;
    let config = stream_config("S", "s", args.from);
    findings::retry(|| api(&client, "STREAM.CREATE.S", &config)).await?;
    let filled = Instant::now();
    let payload = bytes::Bytes::from(vec![b'x'; args.size]);
    let js = async_nats::jetstream::new(client.clone());
    // Pipelined acknowledged publishes: the backlog is stored when the last ack comes.
    let mut acks = Vec::with_capacity(256);
    for i in 1..=args.backlog {
        acks.push(js.publish("s", payload.clone()).await?);
        if acks.len() == 256 || i == args.backlog {
            for a in acks.drain(..) {
                a.await?;
            }
        }
    }
    let fill_s = filled.elapsed().as_secs_f64();
    let empty = json!({});
    let started = Instant::now();
    let last_acked = Arc::new(AtomicU64::new(args.backlog));
    let publisher = tokio::spawn(publish(js.clone(), payload.clone(), last_acked.clone()));
    let scale = |r: usize| {
        let client = client.clone();
        let config = stream_config("S", "s", r);
        async move { (started.elapsed().as_secs_f64(), api(&client, "STREAM.UPDATE.S", &config).await.err().map(|e| e.to_string())) }
    };
    let mut scales = vec![json!({ "to": args.up, "at": scale(args.up).await })];
    let mut down_at = args.down.map(|r| (r, started + Duration::from_millis(args.down_after_ms)));
    let mut probes: Vec<Value> = Vec::new();
    let (mut stale, mut k) = (0, 0);
    let mut watched: Vec<(String, f64, u64, usize)> = Vec::new();
    while started.elapsed() < Duration::from_secs(args.probe) {
        if let Some((r, _)) = down_at.filter(|(_, at)| Instant::now() >= *at) {
            scales.push(json!({ "to": r, "at": scale(r).await }));
            down_at = None;
        }
        // A stale consumer is kept and asked again: when does it see what it was owed?
        let mut still = Vec::new();
        for (name, since, owed, i) in watched.drain(..) {
            let seen = api(&client, &format!("CONSUMER.INFO.S.{name}"), &empty).await.ok().and_then(|ci| ci["num_pending"].as_u64());
            if seen.is_some_and(|p| p >= owed) {
                probes[i]["stale_for_s"] = json!(started.elapsed().as_secs_f64() - since);
                let _ = api(&client, &format!("CONSUMER.DELETE.S.{name}"), &empty).await;
            } else {
                still.push((name, since, owed, i));
            }
        }
        watched = still;
        k += 1;
        let peers = api(&client, "STREAM.INFO.S", &empty).await.ok().map(|i| {
            let mut p = vec![json!({ "leader": i["cluster"]["leader"], "last_seq": i["state"]["last_seq"] })];
            p.extend(i["cluster"]["replicas"].as_array().into_iter().flatten().map(|r| json!({ "name": r["name"], "current": r["current"], "lag": r["lag"] })));
            p
        });
        let acked = last_acked.load(Ordering::Relaxed);
        let start = acked.saturating_sub(args.behind).max(1);
        let name = format!("probe-{k}");
        let body = json!({ "stream_name": "S", "config": {
            "name": name, "deliver_policy": "by_start_sequence", "opt_start_seq": start, "ack_policy": "none",
            "mem_storage": true, "num_replicas": 1, "inactive_threshold": 5_000_000_000u64 } });
        let t = started.elapsed().as_secs_f64();
        match api(&client, &format!("CONSUMER.CREATE.S.{name}"), &body).await {
            Ok(ci) => {
                // What the stream held past `start` when this consumer was asked for.
                let owed = acked + 1 - start;
                let pending = ci["num_pending"].as_u64().unwrap_or(0);
                let is_stale = pending < owed;
                stale += usize::from(is_stale);
                probes.push(json!({ "t_s": t, "start": start, "acked": acked, "leader": ci["cluster"]["leader"], "num_pending": pending,
                                    "owed": owed, "delivered_stream_seq": ci["delivered"]["stream_seq"], "stale": is_stale, "stream": peers }));
                if is_stale {
                    watched.push((name, t, owed, probes.len() - 1));
                } else {
                    let _ = api(&client, &format!("CONSUMER.DELETE.S.{name}"), &empty).await;
                }
            }
            Err(e) => probes.push(json!({ "t_s": t, "error": e.to_string(), "stream": peers })),
        }
        tokio::time::sleep(Duration::from_millis(args.every_ms)).await;
    }
    publisher.abort();
    for (_, _, _, i) in &watched {
        probes[*i]["stale_for_s"] = json!(format!("still stale after {} s", args.probe));
    }
    if stale > 0 {
        let lines = cluster.log_lines(&["> S'", "Catchup", "stream leader", "consumer leader", "emap", "catchup"]);
        std::fs::write(dir.join("server-lines.txt"), lines.join("\n"))?;
    }
    let first_stale = probes.iter().find(|p| p["stale"] == true).cloned();
    Ok(json!({ "stale": stale, "probes_made": probes.len(), "first_stale": first_stale, "backlog": args.backlog, "size": args.size, "fill_s": fill_s,
               "from": args.from, "up": args.up, "down": args.down, "scales": scales, "probes": probes, "dir": dir }))
}

/// One acknowledged message every 10 ms; `last_acked` follows the acks.
async fn publish(js: async_nats::jetstream::Context, payload: bytes::Bytes, last_acked: Arc<AtomicU64>) {
    loop {
        let ack = match js.publish("s", payload.clone()).await {
            Ok(reply) => reply.await.ok(),
            Err(_) => None,
        };
        if let Some(ack) = ack {
            last_acked.fetch_max(ack.sequence, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
