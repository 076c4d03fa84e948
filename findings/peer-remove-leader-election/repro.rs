//! How long does a stream stop acknowledging publishes when one of its peers is removed
//! (`$JS.API.STREAM.PEER.REMOVE`) while a pipelined publisher is sending? No faults.
//!
//! Per trial: a fresh `--nodes`-node cluster; stream `S` (`--replicas` copies, file) on
//! subject `s`. One task publishes message `i` with `Nats-Msg-Id` `m-<i>` and
//! `Nats-Expected-Last-Sequence: i - 1`, `--depth` publishes awaiting their acks at once
//! (each acknowledged within `--ack-timeout` or sent again, from the first unacknowledged
//! message, under the same ids). After `--warmup` seconds, every `--every` seconds one of
//! the stream's peers is removed: the leader and a follower in turn. For each removal are
//! measured: how long after the request a stream info (asked every 100 ms, 1 s timeout each)
//! first names a leader other than the removed peer, and the longest stretch without a new
//! ack from 1 s before the request to `--every` seconds after it. A trial *shows it* when
//! the stream was left without a leader for at least `--leaderless` seconds after its
//! leader was removed (a handover takes milliseconds; an election waits out a timeout).

use async_nats::jetstream::{self, message::PublishMessage};
use clap::Parser;
use findings::{api, stream_config, Cluster};
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ID: &str = "peer-remove-leader-election";

/// How long does a stream stop acknowledging publishes when one of its peers is removed (`$JS.API.STREAM.PEER.REMOVE`) while a pipelined publisher is sending? No faults.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trials: findings::Trials,
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// The stream's replicas.
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// Seconds of publishing before the first removal.
    #[arg(long, default_value_t = 10)]
    warmup: u64,
    /// Peer removals per trial.
    #[arg(long, default_value_t = 4)]
    removals: u32,
    /// Seconds between removals (and measured after each).
    #[arg(long, default_value_t = 15)]
    every: u64,
    /// Publishes awaiting their acks at once.
    #[arg(long, default_value_t = 16)]
    depth: usize,
    /// Seconds a publish waits for its ack before it is sent again.
    #[arg(long, default_value_t = 5)]
    ack_timeout: u64,
    /// Seconds without a leader, after the leader's removal, that count as showing it.
    #[arg(long, default_value_t = 3.0)]
    leaderless: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let args = &args;
    args.trials.run(ID, |dir| async move {
        let details = run_trial(args, &dir).await?;
        let showed = details["showed"] == true;
        Ok((showed, details))
    })
    .await
}

/// Every ack's time (seconds since the start), and the errors met.
#[derive(Default)]
struct Seen {
    acks: Vec<f64>,
    errors: Vec<(f64, String)>,
}

async fn run_trial(args: &Args, dir: &std::path::Path) -> anyhow::Result<Value> {
    let cluster = Cluster::start(&args.trials.server, args.nodes, dir, false).await?;
    let client = async_nats::ConnectOptions::new().connect(cluster.urls()).await?;
    let config = stream_config("S", "s", args.replicas);
    findings::retry(|| api(&client, "STREAM.CREATE.S", &config)).await?;
    let started = Instant::now();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let publisher = tokio::spawn(publish(client.clone(), args.depth, args.ack_timeout, started, seen.clone()));
    tokio::time::sleep(Duration::from_secs(args.warmup)).await;
    let mut removals = Vec::new();
    let empty = json!({});
    for k in 0..args.removals {
        let info = findings::retry(|| api(&client, "STREAM.INFO.S", &empty)).await?;
        let leader = info["cluster"]["leader"].as_str().unwrap_or_default().to_string();
        let followers: Vec<String> = info["cluster"]["replicas"].as_array().into_iter().flatten().filter_map(|r| r["name"].as_str().map(String::from)).collect();
        let (role, peer) = match (k % 2, followers.first()) {
            (1, Some(f)) => ("follower", f.clone()),
            _ => ("leader", leader.clone()),
        };
        let at = started.elapsed().as_secs_f64();
        let answer = api(&client, "STREAM.PEER.REMOVE.S", &json!({ "peer": peer })).await;
        let next = Instant::now() + Duration::from_secs(args.every);
        let new_leader = loop {
            if Instant::now() >= next {
                break None;
            }
            let asked = tokio::time::timeout(Duration::from_secs(1), api(&client, "STREAM.INFO.S", &empty)).await;
            if let Ok(Ok(info)) = asked {
                let l = info["cluster"]["leader"].as_str().unwrap_or_default();
                if !l.is_empty() && l != peer {
                    break Some((l.to_string(), started.elapsed().as_secs_f64() - at));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        tokio::time::sleep_until(next.into()).await;
        let after = api(&client, "STREAM.INFO.S", &empty).await.ok();
        let peers_after = after.as_ref().map(|i| {
            let mut p = vec![i["cluster"]["leader"].clone()];
            p.extend(i["cluster"]["replicas"].as_array().into_iter().flatten().map(|r| json!({ "name": r["name"], "current": r["current"], "lag": r["lag"] })));
            p
        });
        let (gap, gap_from) = longest_gap(&seen.lock().unwrap().acks, at - 1.0, started.elapsed().as_secs_f64());
        removals.push(json!({ "t_s": at, "role": role, "peer": peer, "leader_before": leader, "followers_before": followers,
                              "error": answer.err().map(|e| e.to_string()), "new_leader": new_leader.as_ref().map(|l| &l.0),
                              "new_leader_after_s": new_leader.as_ref().map(|l| l.1), "longest_gap_s": gap, "gap_from_s": gap_from, "after": peers_after }));
    }
    publisher.abort();
    let s = seen.lock().unwrap();
    let errors: Vec<Value> = s.errors.iter().take(40).map(|(t, e)| json!([t, e])).collect();
    let showed = removals.iter().any(|r| r["role"] == "leader" && r["new_leader_after_s"].as_f64().is_none_or(|t| t >= args.leaderless));
    if showed {
        let lines = cluster.log_lines(&["> S'", "new stream leader", "Catchup", "stream leader", "emoving", "peer"]);
        std::fs::write(dir.join("server-lines.txt"), lines.join("\n"))?;
    }
    Ok(json!({ "showed": showed, "replicas": args.replicas, "nodes": args.nodes, "depth": args.depth, "acked": s.acks.len(), "removals": removals, "errors": errors, "dir": dir }))
}

/// The longest stretch in [from, to] with no ack (counting from `from` and up to `to`), and where it began.
fn longest_gap(acks: &[f64], from: f64, to: f64) -> (f64, f64) {
    let mut last = from;
    let mut best = (0.0, from);
    for &t in acks.iter().filter(|&&t| t > from && t <= to).chain(std::iter::once(&to)) {
        if t - last > best.0 {
            best = (t - last, last);
        }
        last = t;
    }
    best
}

/// Publishes 1, 2, 3, ... pipelined, `depth` in flight, each with `Nats-Msg-Id: m-<i>` and
/// the expected last sequence `i - 1`; on any failure sends again from the first
/// unacknowledged message.
async fn publish(client: async_nats::Client, depth: usize, ack_timeout: u64, started: Instant, seen: Arc<Mutex<Seen>>) -> anyhow::Result<()> {
    let js = jetstream::ContextBuilder::new().timeout(Duration::from_secs(ack_timeout)).build(client);
    let mut next_ack = 1u64;
    loop {
        let mut in_flight = FuturesOrdered::new();
        let mut next_send = next_ack;
        let failed = loop {
            while in_flight.len() < depth {
                let i = next_send;
                let msg = PublishMessage::build().payload(format!("message {i}").into()).message_id(format!("m-{i}")).expected_last_sequence(i - 1);
                match js.send_publish("s", msg).await {
                    Ok(ack) => in_flight.push_back(async move { (i, ack.await) }),
                    Err(_) => break,
                }
                next_send += 1;
            }
            let Some((i, reply)) = in_flight.next().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                break None;
            };
            match reply {
                Ok(ack) if ack.sequence == i => {
                    seen.lock().unwrap().acks.push(started.elapsed().as_secs_f64());
                    next_ack = i + 1;
                }
                Ok(ack) => anyhow::bail!("message {i} acknowledged at sequence {}", ack.sequence),
                Err(e) => break Some(e),
            }
        };
        if let Some(e) = failed {
            let text = format!("{e} {:?}", std::error::Error::source(&e).map(ToString::to_string));
            seen.lock().unwrap().errors.push((started.elapsed().as_secs_f64(), text));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
