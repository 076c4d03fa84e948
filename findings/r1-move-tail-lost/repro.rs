//! Moving an R1 stream whose new server keeps failing to catch up: is the acknowledged
//! tail still there once the move has settled? See README.md beside this file.
//!
//! Per trial: a fresh 3-node cluster whose nodes carry tags t1, t2, t3; stream `S` (R1,
//! file) placed on t1; `--backlog` messages published first; then, while one client keeps
//! publishing, the stream is moved to t2 (`STREAM.UPDATE` with `placement.tags`), and the
//! new server (n2) is killed and restarted `--target-kills` times during its copy, the
//! old one (n1) once. When the move has settled (one peer, on n2) or `--settle` ran out, the
//! publisher stops and the stream's state is compared with the last acknowledged sequence:
//! a stream that ends before it lost acknowledged messages.

use clap::Parser;
use findings::{api, Cluster};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ID: &str = "r1-move-tail-lost";

/// Moving an R1 stream whose new server keeps failing to catch up: is the acknowledged tail still there once the move has settled? See README.md beside this file.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trials: findings::Trials,
    /// Messages in the stream before the move.
    #[arg(long, default_value_t = 200_000)]
    backlog: u64,
    /// Times the new server is killed (3 s each) while it copies.
    #[arg(long, default_value_t = 3)]
    target_kills: usize,
    /// Seconds to wait for the move to settle.
    #[arg(long, default_value_t = 180)]
    settle: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let args = &args;
    args.trials.run(ID, |dir| async move {
        let details = run_trial(args, &dir).await?;
        Ok((details["lost"].as_u64().unwrap_or(0) > 0, details))
    })
    .await
}

fn config(tag: &str) -> Value {
    let mut c = findings::stream_config("S", "s", 1);
    c["placement"] = json!({ "tags": [tag] });
    c
}

async fn run_trial(args: &Args, dir: &std::path::Path) -> anyhow::Result<Value> {
    let mut cluster = Cluster::start(&args.trials.server, 3, dir, true).await?;
    let client = async_nats::ConnectOptions::new().retry_on_initial_connect().connect(cluster.urls()).await?;
    let on_t1 = config("t1");
    findings::retry(|| api(&client, "STREAM.CREATE.S", &on_t1)).await?;
    let js = async_nats::jetstream::new(client.clone());
    // The backlog, 256 in flight.
    let mut acks = Vec::new();
    for i in 1..=args.backlog {
        acks.push(js.send_publish("s", async_nats::jetstream::message::PublishMessage::build().payload(vec![b'x'; 128].into())).await?);
        if acks.len() == 256 || i == args.backlog {
            for a in acks.drain(..) {
                a.await?;
            }
        }
    }
    let acked = Arc::new(AtomicU64::new(args.backlog));
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = tokio::spawn(publish(js.clone(), acked.clone(), stop.clone()));

    let started = Instant::now();
    let moved = api(&client, "STREAM.UPDATE.S", &config("t2")).await;
    let mut events = vec![json!({ "t_s": 0.0, "event": "move to t2", "answer": moved.as_ref().map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string()) })];
    let mut note = |what: String| events.push(json!({ "t_s": started.elapsed().as_secs_f64(), "event": what }));
    for k in 0..args.target_kills {
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster.kill(1);
        note(format!("killed n2 ({})", k + 1));
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.restart(1)?;
        note("restarted n2".into());
        if k == 0 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            cluster.kill(0);
            note("killed n1".into());
            tokio::time::sleep(Duration::from_secs(2)).await;
            cluster.restart(0)?;
            note("restarted n1".into());
        }
    }
    // Settled: one peer, the leader n2, nothing being moved.
    let deadline = Instant::now() + Duration::from_secs(args.settle);
    let mut info = Value::Null;
    let settled = loop {
        if let Ok(i) = api(&client, "STREAM.INFO.S", &Value::Null).await {
            let on_n2 = i["cluster"]["leader"] == "n2" && i["cluster"]["replicas"].as_array().is_none_or(Vec::is_empty);
            info = i;
            if on_n2 {
                break true;
            }
        }
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    note(format!("settled: {settled}"));
    stop.store(true, Relaxed);
    publisher.await?;
    let last_acked = acked.load(Relaxed);
    // The stream's account after the publisher stopped, asked until a leader answers.
    let after = findings::retry(|| api(&client, "STREAM.INFO.S", &Value::Null)).await.unwrap_or(info);
    let (last_seq, messages) = (after["state"]["last_seq"].as_u64().unwrap_or(0), after["state"]["messages"].as_u64().unwrap_or(0));
    let lost = last_acked.saturating_sub(messages);
    if lost > 0 {
        let lines = cluster.log_lines(&["'APP > S'", "catchup", "Catchup", "Transfer", "leader"]);
        std::fs::write(dir.join("server-lines.txt"), lines.join("\n"))?;
    }
    Ok(json!({
        "backlog": args.backlog, "last_acked": last_acked, "last_seq": last_seq, "messages": messages, "lost": lost,
        "settled": settled, "seconds": started.elapsed().as_secs_f64(), "cluster": after["cluster"], "events": events, "dir": dir,
    }))
}

/// Publishes one message at a time until stopped, counting the acknowledged sequence.
async fn publish(js: async_nats::jetstream::Context, acked: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Relaxed) {
        let ack = match js.send_publish("s", async_nats::jetstream::message::PublishMessage::build().payload(vec![b'y'; 128].into())).await {
            Ok(a) => a.await,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match ack {
            Ok(a) => {
                acked.fetch_max(a.sequence, Relaxed);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
