//! A durable consumer's ack floor passes a message it never delivered, while its stream's
//! replica count changes (no faults). See README.md beside this file.
//!
//! Per trial: a fresh 3-node cluster; stream `S` (R3, file) on subject `s`; durable pull
//! consumer `D` (explicit acks, ack wait 5 s, replicas following the stream). One task
//! publishes for `--seconds`; one pulls with raw `CONSUMER.MSG.NEXT` requests and
//! acknowledges every delivery with a double ack (`+ACK` as a request, the server's empty
//! reply confirms it); one changes the stream's replica count every 2-4 s (1, 2 or 3); one
//! reads the consumer's ack floor every 500 ms. A message is *skipped* when the floor
//! stands at or past it, it was never delivered, and the stream still holds it. After
//! publishing stops the consumer is drained (at most 60 s) and each skipped message is
//! checked once more: was it delivered in the end?
//!
//! A skip counts once two consecutive CONSUMER.INFO answers from the same consumer leader
//! both put the floor at or past it while it was still not delivered (each answer's
//! delivered sequences, `num_ack_pending`, `num_redelivered` and leader are kept). With
//! `--disrupt`, the first such skip is followed by a step-down of the consumer's leader
//! (where it has peers) and a restart of the server that led it, at once, before the ack
//! wait could redeliver it; the drain then lasts at least three ack waits after the
//! restart: is the message ever delivered? With `--evacuate`, the stream stays at R3 and
//! the consumer (one replica) is evacuated off its server every 2-4 s instead (with
//! `--whole-server`, the whole server is evacuated, stream replica and all).

use clap::Parser;
use findings::{api, stream_config, Cluster};
use futures::StreamExt;
use rand::Rng;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ID: &str = "durable-ack-floor-skip";

/// A durable consumer's ack floor passes a message it never delivered, while its stream's replica count changes (no faults).
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trials: findings::Trials,
    /// Seconds of publishing and rescaling per trial.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// On the first confirmed skip, step the consumer's leader down and restart its server.
    #[arg(long)]
    disrupt: bool,
    /// Instead of rescaling the stream: keep it at R3, give the consumer one replica, and
    /// every 2-4 s evacuate the consumer off its server (`CONSUMER.PEER.EVACUATE`, 2.15),
    /// which moves it to a new one-replica group (the workload's soak of 2026-12-07 met a
    /// skip while an R1 consumer's server was evacuated).
    #[arg(long)]
    evacuate: bool,
    /// With `--evacuate`: change nothing (the control: an R1 consumer left where it is).
    #[arg(long, requires = "evacuate")]
    control: bool,
    /// With `--evacuate`: evacuate the consumer's whole server (`SERVER.EVACUATE`, system
    /// account: the stream's replica there moves too) instead of the consumer alone.
    #[arg(long, requires = "evacuate")]
    whole_server: bool,
    /// Cluster size (a server evacuation needs a server outside the stream to move to).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
}

const ACK_WAIT: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let args = &args;
    args.trials.run(ID, |dir| async move {
        let details = run_trial(args, &dir).await?;
        Ok((!details["skipped"].as_array().is_some_and(Vec::is_empty), details))
    })
    .await
}

/// When each sequence happened first (seconds since the trial started; a trial is small
/// enough to keep one number per message): its publish ack, or its delivery.
struct Firsts {
    started: Instant,
    at: Vec<f32>,
}

impl Firsts {
    fn new(started: Instant) -> Self {
        Self { started, at: Vec::new() }
    }

    fn mark(&mut self, seq: u64) {
        let i = seq as usize;
        if self.at.len() <= i {
            self.at.resize(i + 1, f32::NAN);
        }
        if self.at[i].is_nan() {
            self.at[i] = self.started.elapsed().as_secs_f32();
        }
    }

    fn when(&self, seq: u64) -> Option<f32> {
        self.at.get(seq as usize).copied().filter(|t| !t.is_nan())
    }

    fn has(&self, seq: u64) -> bool {
        self.when(seq).is_some()
    }

    /// The lowest sequence in 1..=floor never delivered.
    fn first_missing(&self, floor: u64) -> Option<u64> {
        (1..=floor).find(|s| !self.has(*s))
    }
}

async fn run_trial(args: &Args, dir: &std::path::Path) -> anyhow::Result<Value> {
    let mut cluster = Cluster::start(&args.trials.server, args.nodes, dir, false).await?;
    let client = async_nats::ConnectOptions::new().connect(cluster.urls()).await?;
    let system = async_nats::ConnectOptions::with_user_and_password("sys".into(), "sys".into()).connect(cluster.urls()).await?;
    let mut config = stream_config("S", "s", 3);
    findings::retry(|| api(&client, "STREAM.CREATE.S", &config)).await?;
    let consumer = json!({ "stream_name": "S", "config": { "durable_name": "D", "ack_policy": "explicit", "ack_wait": 5_000_000_000u64,
                           "max_deliver": -1, "filter_subject": "s", "max_ack_pending": 10_000, "num_replicas": if args.evacuate { 1 } else { 0 } } });
    findings::retry(|| api(&client, "CONSUMER.CREATE.S.D", &consumer)).await?;

    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let delivered = Arc::new(Mutex::new(Firsts::new(started)));
    let acked = Arc::new(Mutex::new(Firsts::new(started)));
    let publisher = tokio::spawn(publish(client.clone(), acked.clone(), stop.clone()));
    let puller = tokio::spawn(pull(client.clone(), delivered.clone()));
    // Every change asked for: (seconds since the start, "R<n>" or "evacuate <server>").
    let mut changes: Vec<(f64, String)> = Vec::new();
    let mut skipped: Vec<Value> = Vec::new();
    let mut replicas = 3;
    let mut disruption: Option<Value> = None;
    let mut restarted_at: Option<Instant> = None;
    let mut next_scale = Instant::now() + Duration::from_secs(2);
    let end = started + Duration::from_secs(args.seconds);
    while Instant::now() < end {
        // The control changes nothing.
        if !args.control && Instant::now() >= next_scale {
            if args.evacuate {
                let info = api(&client, "CONSUMER.INFO.S.D", &Value::Null).await;
                if let Some(leader) = info.ok().and_then(|i| i["cluster"]["leader"].as_str().map(str::to_string)) {
                    let answer = if args.whole_server {
                        api(&system, "SERVER.EVACUATE", &json!({ "peer": leader })).await
                    } else {
                        api(&client, "CONSUMER.PEER.EVACUATE.S.D", &json!({ "peer": leader })).await
                    };
                    changes.push((started.elapsed().as_secs_f64(), format!("evacuate {}{leader}", if args.whole_server { "server " } else { "" })));
                    if let Err(e) = answer {
                        eprintln!("evacuate {leader}: {e}");
                    }
                }
            } else {
                replicas = loop {
                    let r = rand::thread_rng().gen_range(1..=3);
                    if r != replicas {
                        break r;
                    }
                };
                config["num_replicas"] = json!(replicas);
                let answer = api(&client, "STREAM.UPDATE.S", &config).await;
                changes.push((started.elapsed().as_secs_f64(), format!("R{replicas}")));
                if let Err(e) = answer {
                    eprintln!("scale to R{replicas}: {e}");
                }
            }
            next_scale = Instant::now() + Duration::from_millis(rand::thread_rng().gen_range(2000..=4000));
        }
        look_for_skips(&client, &delivered, started, &mut skipped).await;
        if args.disrupt && disruption.is_none() {
            if let Some(first) = skipped.first() {
                let d = disrupt(&client, &mut cluster, first, started).await;
                restarted_at = Some(Instant::now());
                disruption = Some(d);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Relaxed);
    let published = publisher.await??;
    // Drain: let the consumer deliver what it still owes, with nothing else going on.
    let drained = Instant::now();
    let mut last_info = Value::Null;
    while drained.elapsed() < Duration::from_secs(60) {
        look_for_skips(&client, &delivered, started, &mut skipped).await;
        if let Ok(info) = api(&client, "CONSUMER.INFO.S.D", &Value::Null).await {
            // After a disruption, three ack waits at least: a redelivery has its chance.
            let waited = restarted_at.is_none_or(|at| at.elapsed() >= 3 * ACK_WAIT);
            let idle = info["num_pending"] == 0 && info["num_ack_pending"] == 0 && waited;
            last_info = info;
            if idle {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if puller.is_finished() {
        eprintln!("the puller ended early: {:?}", puller.await);
    } else {
        puller.abort();
    }
    let (delivered, acked) = (delivered.lock().unwrap(), acked.lock().unwrap());
    for s in &mut skipped {
        let seq = s["seq"].as_u64().unwrap_or(0);
        s["delivered_in_the_end"] = json!(delivered.has(seq));
        s["delivered_at_s"] = json!(delivered.when(seq));
        s["published_at_s"] = json!(acked.when(seq));
        // The replica changes asked for within 10 s before it was published and after.
        let t = f64::from(acked.when(seq).unwrap_or(f32::NAN));
        s["replica_changes_near"] = json!(changes.iter().filter(|(c, _)| (c - t).abs() <= 10.0).collect::<Vec<_>>());
    }
    let never = delivered.first_missing(published);
    if !skipped.is_empty() {
        let lines = cluster.log_lines(&["> S > D", "remapping", "consumer", "Consumer"]);
        std::fs::write(dir.join("server-lines.txt"), lines.join("\n"))?;
    }
    Ok(json!({
        "published": published,
        "replica_changes": changes.len(),
        "skipped": skipped,
        "disruption": disruption,
        "first_skip_never_delivered": disruption.as_ref().and(skipped.first()).map(|s| s["delivered_in_the_end"] == false),
        "first_never_delivered_at_end": never,
        "consumer_at_end": { "ack_floor": last_info["ack_floor"], "delivered": last_info["delivered"],
                             "num_pending": last_info["num_pending"], "num_ack_pending": last_info["num_ack_pending"], "cluster": last_info["cluster"] },
        "dir": dir,
    }))
}

/// Publishes 1, 2, 3, ... (each with its own message id, retried until acknowledged) until
/// stopped; returns the last acknowledged sequence.
async fn publish(client: async_nats::Client, acked: Arc<Mutex<Firsts>>, stop: Arc<AtomicBool>) -> anyhow::Result<u64> {
    let js = async_nats::jetstream::new(client);
    let mut last = 0;
    let mut i = 0u64;
    while !stop.load(Relaxed) {
        i += 1;
        loop {
            let msg = async_nats::jetstream::message::PublishMessage::build().payload(format!("message {i}").into()).message_id(i.to_string());
            match js.send_publish("s", msg).await {
                Ok(ack) => match ack.await {
                    Ok(ack) => {
                        acked.lock().unwrap().mark(ack.sequence);
                        last = last.max(ack.sequence);
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                },
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
            if stop.load(Relaxed) {
                return Ok(last);
            }
        }
    }
    Ok(last)
}

const BATCH: usize = 100;

/// Pulls batches of up to [`BATCH`] with raw requests and double-acks every delivery, until aborted.
async fn pull(client: async_nats::Client, delivered: Arc<Mutex<Firsts>>) -> anyhow::Result<()> {
    let inbox = client.new_inbox();
    let mut sub = client.subscribe(inbox.clone()).await?;
    let request = json!({ "batch": BATCH, "expires": 1_000_000_000u64 }).to_string();
    loop {
        if let Err(e) = client.publish_with_reply("$JS.API.CONSUMER.MSG.NEXT.S.D", inbox.clone(), request.clone().into()).await {
            eprintln!("pull request not sent: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
        for _ in 0..BATCH {
            let msg = match tokio::time::timeout_at(deadline, sub.next()).await {
                Ok(Some(msg)) => msg,
                Ok(None) => anyhow::bail!("the pull subscription ended"),
                Err(_) => break,
            };
            if msg.status.is_some() {
                break; // 408 request expired, 404 nothing pending, 409 ...
            }
            let Some(reply) = msg.reply.clone() else { continue };
            let Some(seq) = stream_seq(&reply) else { continue };
            delivered.lock().unwrap().mark(seq);
            let c = client.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(2), c.request(reply, "+ACK".into())).await;
            });
        }
    }
}

/// The stream sequence of a delivery, from its ack subject:
/// `$JS.ACK.S.D.<delivered>.<sseq>...` or `$JS.ACK.<domain>.<account>.S.D.<delivered>.<sseq>...`.
fn stream_seq(reply: &str) -> Option<u64> {
    let tokens: Vec<&str> = reply.split('.').collect();
    let at = tokens.iter().position(|t| *t == "S")?;
    tokens.get(at + 3)?.parse().ok()
}

/// What one CONSUMER.INFO answer says about the floor and what is outstanding.
fn answer(info: &Value, t_s: f64) -> Value {
    json!({ "t_s": t_s, "leader": info["cluster"]["leader"], "ack_floor": info["ack_floor"]["stream_seq"],
            "delivered": info["delivered"], "num_ack_pending": info["num_ack_pending"], "num_redelivered": info["num_redelivered"],
            "num_pending": info["num_pending"] })
}

/// Reads the consumer's ack floor; a never-delivered message at or below it that the stream
/// still holds, and that a second answer from the same leader still finds passed and not
/// delivered, is recorded (once) with both answers.
async fn look_for_skips(client: &async_nats::Client, delivered: &Mutex<Firsts>, started: Instant, skipped: &mut Vec<Value>) {
    let Ok(info) = api(client, "CONSUMER.INFO.S.D", &Value::Null).await else { return };
    let first_at = started.elapsed().as_secs_f64();
    let floor = info["ack_floor"]["stream_seq"].as_u64().unwrap_or(0);
    let missing = delivered.lock().unwrap().first_missing(floor);
    let Some(seq) = missing else { return };
    if skipped.iter().any(|s| s["seq"] == seq) {
        return;
    }
    let Ok(again) = api(client, "CONSUMER.INFO.S.D", &Value::Null).await else { return };
    let again_at = started.elapsed().as_secs_f64();
    let confirmed = again["cluster"]["leader"] == info["cluster"]["leader"]
        && again["ack_floor"]["stream_seq"].as_u64().is_some_and(|f| f >= seq)
        && !delivered.lock().unwrap().has(seq);
    if !confirmed {
        return;
    }
    let stored = api(client, "STREAM.MSG.GET.S", &json!({ "seq": seq })).await;
    if let Ok(m) = stored {
        if m["message"]["subject"] == "s" {
            skipped.push(json!({ "seq": seq, "ack_floor": floor, "t_s": started.elapsed().as_secs_f64(),
                                 "answers": [answer(&info, first_at), answer(&again, again_at)],
                                 "consumer_cluster": again["cluster"], "stream_holds_it": true }));
        }
    }
}

/// Steps the consumer's leader down (when it has peers) and restarts the server that led
/// it, right after the skip was confirmed; what was done, and when.
async fn disrupt(client: &async_nats::Client, cluster: &mut Cluster, skip: &Value, started: Instant) -> Value {
    let leader = skip["consumer_cluster"]["leader"].as_str().unwrap_or_default().to_string();
    let peers = skip["consumer_cluster"]["replicas"].as_array().map_or(0, Vec::len);
    let stepdown = if peers > 0 { Some(api(client, "CONSUMER.LEADER.STEPDOWN.S.D", &Value::Null).await.map(|_| ()).map_err(|e| e.to_string())) } else { None };
    let stepped_down_s = started.elapsed().as_secs_f64();
    let restart = match cluster.nodes.iter().position(|n| n.name == leader) {
        Some(i) => cluster.restart(i).map_err(|e| e.to_string()),
        None => Err(format!("no node named {leader:?}")),
    };
    let restarted_s = started.elapsed().as_secs_f64();
    let healthy = cluster.wait_healthy(Duration::from_secs(30)).await.map_err(|e| e.to_string());
    json!({ "seq": skip["seq"], "consumer_leader": leader, "consumer_peers": peers + 1, "stepdown": stepdown.map(|r| r.err().unwrap_or_else(|| "ok".into())),
            "stepped_down_s": stepped_down_s, "restarted": restart.err().unwrap_or_else(|| "ok".into()), "restarted_s": restarted_s,
            "healthy_again_s": healthy.is_ok().then(|| started.elapsed().as_secs_f64()) })
}
