//! Moving a one-replica stream while it takes writes: once the new server has copied the
//! stream, it pauses its part in the group's quorum ("Quorum paused, falling behind") to
//! apply the entries it logged meanwhile, and the two-server group it forms with the old
//! one takes no write until it is done. See README.md beside this file.
//!
//! Per trial: a fresh cluster of `--nodes`; stream `S` (R1, file) filled with `--backlog`
//! messages; one publisher (ids, expected last sequence, `--depth` in flight, resends from
//! the first unacknowledged message); after `--warmup` seconds the stream's server is
//! evacuated (`STREAM.PEER.EVACUATE`, 2.15; `--move-by-tags` moves it by placement tags
//! instead). The trial watches until the move has settled and `--after-settle` seconds
//! more (at most `--observe`). It *shows it* when no ack came for at least `--stall`
//! seconds and a server logged "Quorum paused". A smaller `--backlog` (a copy short enough
//! that fewer entries pile up) is the control.

use clap::Parser;
use findings::r1_move::{self, MoveTrial, Writes};
use findings::{api, stream_config, Cluster};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const ID: &str = "r1-move-new-peer-paused";

/// A one-replica stream moved under writes: does its new server pause the quorum after its copy?
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trials: findings::Trials,
    #[command(flatten)]
    t: MoveTrial,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let args = &args;
    args.trials.run(ID, |dir| async move {
        let details = run_trial(args, &dir).await?;
        let stalled = details["writes"]["longest_without_ack_s"].as_f64().unwrap_or(0.0) >= args.t.stall;
        Ok((stalled && details["quorum_paused"].as_array().is_some_and(|l| !l.is_empty()), details))
    })
    .await
}

async fn run_trial(args: &Args, dir: &std::path::Path) -> anyhow::Result<Value> {
    let cluster = Cluster::start(&args.trials.server, args.t.nodes, dir, true).await?;
    let client = async_nats::ConnectOptions::new().connect(cluster.urls()).await?;
    let mut config = stream_config("S", "s", 1);
    findings::retry(|| api(&client, "STREAM.CREATE.S", &config)).await?;
    r1_move::fill(&client, args.t.backlog, args.t.payload).await?;

    let move_at = Instant::now() + Duration::from_secs(args.t.warmup);
    let clock = r1_move::clock(move_at);
    let writes = Writes::start(client.clone(), args.t.depth, args.t.payload, args.t.backlog + 1, clock);
    tokio::time::sleep_until(move_at.into()).await;

    let moved_from = r1_move::single_peer(&client, Duration::from_secs(5)).await;
    let mut asked = match &moved_from {
        Some(p) => r1_move::move_off(&client, &cluster, &mut config, p, args.t.move_by_tags).await,
        None => json!({ "event": "no single peer within 5 s: not moved" }),
    };
    asked["t_s"] = json!(clock());
    let watched = r1_move::watch(&client, moved_from.as_deref(), clock, args.t.observe as f64, args.t.after_settle as f64).await;
    let writes = writes.stop(clock());
    let lines = cluster.log_lines(&["> S'", "remapping", "stream leader", "Catchup", "catchup", "stalled", "Quorum"]);
    let paused: Vec<&String> = lines.iter().filter(|l| l.contains("Quorum paused")).collect();
    if writes["longest_without_ack_s"].as_f64().unwrap_or(0.0) >= args.t.stall {
        std::fs::write(dir.join("server-lines.txt"), lines.join("\n"))?;
    }
    Ok(json!({ "nodes": args.t.nodes, "backlog": args.t.backlog, "asked": asked, "writes": writes, "stream": watched,
               "quorum_paused": paused, "dir": dir }))
}
