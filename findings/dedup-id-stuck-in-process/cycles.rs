//! A retried `Nats-Msg-Id` is answered 10158 "duplicate message id is in process" for as
//! long as the stream's duplicate window, after the stream is scaled R3 → R1 → R3 while a
//! pipelined publisher is sending (no faults): the variants that have not shown it (0 of 22
//! trials); `repro.rs` beside it shows it. See README.md beside this file.
//!
//! Per trial: a fresh 3-node cluster; stream `S` (R3, file, duplicate window
//! `--duplicate-window`) on subject `s`. One task publishes message `i` with `Nats-Msg-Id`
//! `m-<i>` and `Nats-Expected-Last-Sequence: i - 1`, `--depth` publishes awaiting their
//! acks at once; on any failure it gives up what is in flight and sends again from the
//! first unacknowledged message, under the same ids (as a publisher that must keep its
//! stream gap-free does). After `--warmup` seconds, another task scales the stream R3 → R1, waits `--gap-ms`, scales
//! it back to R3, waits `--settle` seconds, and does it again, `--cycles` times. Optionally
//! (`--consumers`) a durable pull consumer acks every message and an ordered-style
//! ephemeral consumer reads along, as the workload's readers do. A trial *shows it* when a
//! message's every send for `--stuck` seconds was answered 10158; it then waits (at most the
//! duplicate window and 30 s) for that message to be acknowledged, and says how long it
//! took, or that it never was.

use async_nats::jetstream::{self, context::PublishErrorKind, message::PublishMessage};
use clap::Parser;
use findings::{api, stream_config, Cluster};
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ID: &str = "dedup-id-stuck-in-process-cycles";

/// A retried `Nats-Msg-Id` is answered 10158 "duplicate message id is in process" for as long as the stream's duplicate window, after the stream is scaled R3 → R1 → R3 while a pipelined publisher is sending (no faults): the variants that have not shown it (0 of 22 trials); `repro.rs` beside it shows it.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trials: findings::Trials,
    /// Seconds of publishing before the first scale (the stream's size when it is scaled).
    #[arg(long, default_value_t = 20)]
    warmup: u64,
    /// Publishes awaiting their acks at once.
    #[arg(long, default_value_t = 16)]
    depth: usize,
    /// Scale cycles (R3 → R1 → R3) per trial.
    #[arg(long, default_value_t = 4)]
    cycles: u32,
    /// Milliseconds between the scale to R1 and the scale back to R3.
    #[arg(long, default_value_t = 3700)]
    gap_ms: u64,
    /// Seconds after each scale back to R3 before the next cycle.
    #[arg(long, default_value_t = 10)]
    settle: u64,
    /// Seconds of 10158 answers to one message that count as stuck.
    #[arg(long, default_value_t = 20)]
    stuck: u64,
    /// The stream's duplicate window, in seconds.
    #[arg(long, default_value_t = 120)]
    duplicate_window: u64,
    /// Also run a durable consumer that acks everything and an ephemeral reader.
    #[arg(long)]
    consumers: bool,
    /// The durable consumer's replicas (0: the stream's).
    #[arg(long, default_value_t = 1)]
    durable_replicas: u64,
    /// Before each scale to R1, evacuate the durable consumer off the stream leader's
    /// server (`CONSUMER.PEER.EVACUATE`, 2.15), so the scale must move it too (the
    /// workload's runs that showed the stall had it elsewhere, and logged two remaps).
    #[arg(long, requires = "consumers")]
    consumer_elsewhere: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let args = &args;
    args.trials.run(ID, |dir| async move {
        let details = run_trial(args, &dir).await?;
        Ok((!details["stuck"].is_null(), details))
    })
    .await
}

/// What the publisher saw, shared with the trial's clock.
#[derive(Default)]
struct Seen {
    acked: u64,
    /// The first unacknowledged message, since when every send of it got 10158, and how
    /// many such answers.
    in_process: Option<(u64, f64, u64)>,
    /// The first message found stuck: index, first 10158 at, answers, and when (if ever)
    /// it was acknowledged at last.
    stuck: Option<(u64, f64, u64, Option<f64>)>,
    other_errors: u64,
}

async fn run_trial(args: &Args, dir: &std::path::Path) -> anyhow::Result<Value> {
    let cluster = Cluster::start(&args.trials.server, 3, dir, false).await?;
    let client = async_nats::ConnectOptions::new().connect(cluster.urls()).await?;
    let mut config = stream_config("S", "s", 3);
    config["duplicate_window"] = json!(args.duplicate_window * 1_000_000_000);
    findings::retry(|| api(&client, "STREAM.CREATE.S", &config)).await?;
    let started = Instant::now();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let publisher = tokio::spawn(publish(client.clone(), args.depth, started, args.stuck as f64, seen.clone()));
    let mut readers = Vec::new();
    if args.consumers {
        let durable = json!({ "stream_name": "S", "config": { "durable_name": "D", "ack_policy": "explicit", "ack_wait": 5_000_000_000u64,
                              "max_deliver": -1, "filter_subject": "s", "max_ack_pending": 10_000, "num_replicas": args.durable_replicas } });
        findings::retry(|| api(&client, "CONSUMER.CREATE.S.D", &durable)).await?;
        readers.push(tokio::spawn(pull_and_ack(client.clone())));
        readers.push(tokio::spawn(read_along(client.clone())));
    }
    tokio::time::sleep(Duration::from_secs(args.warmup)).await;
    // Every scale request: (seconds since the start, replicas, the answer's error if any).
    let mut scales: Vec<Value> = Vec::new();
    let mut evacuations: Vec<Value> = Vec::new();
    for _ in 0..args.cycles {
        if args.consumer_elsewhere {
            evacuations.push(consumer_off_leader(&client, started).await);
        }
        for (replicas, then) in [(1, Duration::from_millis(args.gap_ms)), (3, Duration::from_secs(args.settle))] {
            config["num_replicas"] = json!(replicas);
            let answer = api(&client, "STREAM.UPDATE.S", &config).await;
            scales.push(json!({ "t_s": started.elapsed().as_secs_f64(), "replicas": replicas, "error": answer.err().map(|e| e.to_string()) }));
            tokio::time::sleep(then).await;
        }
        if seen.lock().unwrap().stuck.is_some() {
            break;
        }
    }
    // Stuck: how long does it stay so? At most the duplicate window (after which the server
    // forgets the id) and 30 s more.
    let first_stuck = seen.lock().unwrap().stuck.map(|(_, at, _, _)| at);
    if let Some(at) = first_stuck {
        let until = at + (args.duplicate_window + 30) as f64;
        while started.elapsed().as_secs_f64() < until && seen.lock().unwrap().stuck.is_some_and(|s| s.3.is_none()) {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    publisher.abort();
    readers.iter().for_each(|r| r.abort());
    let s = seen.lock().unwrap();
    let stuck = s.stuck.map(|(index, since, answers, acked)| {
        json!({ "index": index, "first_10158_s": since, "answers_10158": answers, "acked_at_s": acked, "stuck_for_s": acked.map(|a| a - since),
                "last_scale_before": scales.iter().rev().find(|c| c["t_s"].as_f64().is_some_and(|t| t <= since)) })
    });
    if stuck.is_some() {
        let lines = cluster.log_lines(&["> S'", "remapping", "new stream leader", "Catchup", "stream leader"]);
        std::fs::write(dir.join("server-lines.txt"), lines.join("\n"))?;
    }
    Ok(json!({ "acked": s.acked, "scales": scales, "stuck": stuck, "other_errors": s.other_errors, "consumers": args.consumers,
               "consumer_evacuations": evacuations, "dir": dir }))
}

/// Moves the durable consumer `D` off the server leading stream `S` when it is there, and
/// waits (at most 10 s) until its leader is another server. What was done, for the trial's
/// line.
async fn consumer_off_leader(client: &async_nats::Client, started: Instant) -> Value {
    let leader = |v: &Value| v["cluster"]["leader"].as_str().map(str::to_string);
    let (Ok(stream), Ok(consumer)) = (api(client, "STREAM.INFO.S", &Value::Null).await, api(client, "CONSUMER.INFO.S.D", &Value::Null).await) else {
        return json!({ "error": "no stream or consumer info" });
    };
    let (Some(on), Some(at)) = (leader(&stream), leader(&consumer)) else { return json!({ "error": "no leader" }) };
    if on != at {
        return json!({ "t_s": started.elapsed().as_secs_f64(), "stream_leader": on, "consumer_on": at, "evacuated": false });
    }
    let answer = api(client, "CONSUMER.PEER.EVACUATE.S.D", &json!({ "peer": at })).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut now_on = None;
    while Instant::now() < deadline {
        now_on = api(client, "CONSUMER.INFO.S.D", &Value::Null).await.ok().as_ref().and_then(leader);
        if now_on.as_ref().is_some_and(|n| *n != at) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    json!({ "t_s": started.elapsed().as_secs_f64(), "stream_leader": on, "consumer_on": at, "evacuated": true,
            "error": answer.err().map(|e| e.to_string()), "consumer_now_on": now_on })
}

/// Publishes 1, 2, 3, ... pipelined, `depth` in flight, each with `Nats-Msg-Id: m-<i>` and
/// the expected last sequence `i - 1`; on any failure sends again from the first
/// unacknowledged message. Records 10158 streaks on the first unacknowledged message.
async fn publish(client: async_nats::Client, depth: usize, started: Instant, stuck_after: f64, seen: Arc<Mutex<Seen>>) -> anyhow::Result<()> {
    let js = jetstream::ContextBuilder::new().timeout(Duration::from_secs(5)).build(client);
    let mut next_ack = 1u64; // the first unacknowledged message
    loop {
        let mut in_flight = FuturesOrdered::new();
        let mut next_send = next_ack;
        let failed = loop {
            while in_flight.len() < depth {
                let i = next_send;
                let msg = PublishMessage::build().payload(format!("message {i}").into()).message_id(format!("m-{i}")).expected_last_sequence(i - 1);
                match js.send_publish("s", msg).await {
                    Ok(ack) => in_flight.push_back(async move { (i, ack.await) }),
                    Err(_) => break, // not sent: what is in flight is still awaited
                }
                next_send += 1;
            }
            let Some((i, reply)) = in_flight.next().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                break None;
            };
            match reply {
                Ok(ack) if ack.sequence == i => {
                    let t = started.elapsed().as_secs_f64();
                    let mut s = seen.lock().unwrap();
                    s.acked = i;
                    if s.in_process.is_some_and(|(m, _, _)| m == i) {
                        s.in_process = None;
                    }
                    if let Some(stuck) = s.stuck.as_mut().filter(|st| st.0 == i && st.3.is_none()) {
                        stuck.3 = Some(t);
                    }
                    next_ack = i + 1;
                }
                Ok(ack) => anyhow::bail!("message {i} acknowledged at sequence {}", ack.sequence),
                Err(e) => break Some((i, e)),
            }
        };
        let Some((i, e)) = failed else { continue };
        let t = started.elapsed().as_secs_f64();
        let text = format!("{e} {:?}", std::error::Error::source(&e).map(ToString::to_string));
        {
            let mut s = seen.lock().unwrap();
            if i == next_ack && text.contains("10158") {
                let (m, since, n) = s.in_process.filter(|(m, _, _)| *m == i).unwrap_or((i, t, 0));
                s.in_process = Some((m, since, n + 1));
                if t - since >= stuck_after && s.stuck.is_none() {
                    s.stuck = Some((m, since, n + 1, None));
                }
            } else if e.kind() != PublishErrorKind::WrongLastSequence {
                s.other_errors += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A durable pull consumer acking every delivery, until aborted.
async fn pull_and_ack(client: async_nats::Client) -> anyhow::Result<()> {
    let inbox = client.new_inbox();
    let mut sub = client.subscribe(inbox.clone()).await?;
    let request = json!({ "batch": 256, "expires": 1_000_000_000u64 }).to_string();
    loop {
        if client.publish_with_reply("$JS.API.CONSUMER.MSG.NEXT.S.D", inbox.clone(), request.clone().into()).await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
        while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, sub.next()).await {
            if msg.status.is_some() {
                break;
            }
            if let Some(reply) = msg.reply {
                let _ = client.publish(reply, "+ACK".into()).await;
            }
        }
    }
}

/// Reads the stream along with an ephemeral consumer (made anew whenever it ends), until aborted.
async fn read_along(client: async_nats::Client) -> anyhow::Result<()> {
    let js = jetstream::new(client);
    loop {
        let consumer = async {
            let stream = js.get_stream_no_info("S").await?;
            let c = stream.create_consumer(jetstream::consumer::pull::OrderedConfig::default()).await?;
            anyhow::Ok(c.messages().await?)
        };
        if let Ok(mut messages) = consumer.await {
            while let Some(Ok(_)) = messages.next().await {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
