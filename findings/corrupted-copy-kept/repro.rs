//! A replica whose message block was cut short while its server was down: is it repaired
//! from the other two copies, or kept with a hole? See README.md beside this file.
//!
//! Per trial: a fresh 3-node cluster, stream `S` (R3, file) on `s`; `--messages` published
//! (enough to fill more than the first 8 MB block); then a follower is killed, its first
//! message block (`msgs/1.blk`) cut to a fifth of its length, and the follower started
//! again. With nothing written any more, each node's own account of its replica
//! (`/jsz?streams=true`) is read until every copy agrees or `--settle` runs out: a copy
//! still listing interior deletes the leader does not is kept damaged. Then the leader is
//! made to step down until the damaged node leads, and the messages of the hole are asked
//! for (`STREAM.MSG.GET`): a stream whose leader answers "no message found" for
//! acknowledged messages serves the loss.

use clap::Parser;
use findings::{api, Cluster};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const ID: &str = "corrupted-copy-kept";

/// A replica whose message block was cut short while its server was down: is it repaired from the other two copies, or kept with a hole? See README.md beside this file.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trials: findings::Trials,
    /// Messages published before the damage (128-byte payloads).
    #[arg(long, default_value_t = 60_000)]
    messages: u64,
    /// Seconds at rest given to the cluster to repair the damaged copy.
    #[arg(long, default_value_t = 60)]
    settle: u64,
    /// Kill and restart the follower without cutting its block: the control, which must
    /// show no hole, so that a hole is the cut's doing and not the kill's.
    #[arg(long)]
    control: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let args = &args;
    args.trials
        .run(ID, |dir| async move {
            let details = run_trial(args, &dir).await?;
            Ok((details["kept_damaged"] == true, details))
        })
        .await
}

/// A node's own account of its replica of `S`: messages, first and last sequence, deletes.
async fn replica(http: &reqwest::Client, port: u16) -> Option<Value> {
    let jsz: Value = http.get(format!("http://127.0.0.1:{port}/jsz?accounts=true&streams=true")).send().await.ok()?.bytes().await.ok().and_then(|b| serde_json::from_slice(&b).ok())?;
    let streams = jsz["account_details"].as_array()?.iter().flat_map(|a| a["stream_detail"].as_array().cloned().unwrap_or_default());
    let s = streams.into_iter().find(|s| s["name"] == "S")?;
    let st = &s["state"];
    Some(json!({ "messages": st["messages"], "first_seq": st["first_seq"], "last_seq": st["last_seq"], "num_deleted": st["num_deleted"].as_u64().unwrap_or(0) }))
}

async fn run_trial(args: &Args, dir: &std::path::Path) -> anyhow::Result<Value> {
    let mut cluster = Cluster::start(&args.trials.server, 3, dir, false).await?;
    let client = async_nats::ConnectOptions::new().retry_on_initial_connect().connect(cluster.urls()).await?;
    let config = findings::stream_config("S", "s", 3);
    findings::retry(|| api(&client, "STREAM.CREATE.S", &config)).await?;
    let js = async_nats::jetstream::new(client.clone());
    let mut acks = Vec::new();
    for i in 1..=args.messages {
        acks.push(js.send_publish("s", async_nats::jetstream::message::PublishMessage::build().payload(vec![b'x'; 128].into())).await?);
        if acks.len() == 256 || i == args.messages {
            for a in acks.drain(..) {
                a.await?;
            }
        }
    }
    let info = findings::retry(|| api(&client, "STREAM.INFO.S", &Value::Null)).await?;
    let leader = info["cluster"]["leader"].as_str().unwrap_or_default().to_string();
    let victim = cluster.nodes.iter().position(|n| n.name != leader).unwrap_or(0);
    let name = cluster.nodes[victim].name.clone();
    // The follower down, its first block cut to a fifth, the follower up again.
    cluster.kill(victim);
    let block = cluster.nodes[victim].store.join("jetstream/APP/streams/S/msgs/1.blk");
    let size = std::fs::metadata(&block)?.len();
    let cut_to = if args.control { size } else { size / 5 };
    std::fs::OpenOptions::new().write(true).open(&block)?.set_len(cut_to)?;
    cluster.restart(victim)?;
    let healthy = cluster.wait_healthy(Duration::from_secs(60)).await.is_ok();

    // At rest: does every copy come to agree with the leader?
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
    let deadline = Instant::now() + Duration::from_secs(args.settle);
    let copies = loop {
        let mut copies = Vec::new();
        for n in &cluster.nodes {
            copies.push(json!({ "node": n.name, "replica": replica(&http, n.http).await }));
        }
        let deletes: Vec<u64> = copies.iter().map(|c| c["replica"]["num_deleted"].as_u64().unwrap_or(0)).collect();
        let agree = copies.iter().all(|c| c["replica"] == copies[0]["replica"]);
        if agree || Instant::now() > deadline {
            break json!({ "copies": copies, "agree": agree, "deletes": deletes });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let damaged = copies["copies"].as_array().and_then(|c| c.iter().find(|c| c["node"] == name.as_str())).map_or(Value::Null, |c| c["replica"].clone());
    let hole = damaged["num_deleted"].as_u64().unwrap_or(0);
    let kept_damaged = !copies["agree"].as_bool().unwrap_or(true) && hole > 0;

    // Make the damaged node lead, then ask it for the first message it lacks.
    let mut served = Value::Null;
    if kept_damaged {
        for _ in 0..10 {
            let info = api(&client, "STREAM.INFO.S", &Value::Null).await;
            if info.as_ref().is_ok_and(|i| i["cluster"]["leader"] == name.as_str()) {
                let first_seq = damaged["first_seq"].as_u64().unwrap_or(1);
                let mut missing = None;
                for seq in first_seq..=args.messages {
                    if let Err(e) = api(&client, "STREAM.MSG.GET.S", &json!({ "seq": seq })).await {
                        missing = Some(json!({ "seq": seq, "answer": e.to_string() }));
                        break;
                    }
                }
                let state = api(&client, "STREAM.INFO.S", &Value::Null).await.map(|i| i["state"].clone()).unwrap_or(Value::Null);
                served = json!({ "leader": name, "first_missing": missing, "state": state });
                break;
            }
            let _ = api(&client, "STREAM.LEADER.STEPDOWN.S", &Value::Null).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
    }
    Ok(json!({
        "published": args.messages, "damaged": name, "block": { "size_before": size, "size_after": cut_to },
        "healthy_after_restart": healthy, "at_rest_after_s": args.settle, "copies": copies, "kept_damaged": kept_damaged,
        "hole": hole, "damaged_node_leading": served, "dir": dir,
    }))
}
