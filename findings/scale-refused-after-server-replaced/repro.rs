//! Right after a meta leader change, a server holding a replica of an R4 stream is removed
//! and comes back wiped under a new name: how long does the stream's R4 update (the same
//! configuration, asked again) get 10005 "no suitable peers for placement"? See README.md
//! beside this file.
//!
//! Per trial: a fresh 5-node cluster; stream `S` (R4, file) with `--backlog` messages and
//! a publisher going on; `META.LEADER.STEPDOWN` (`--control` leaves it out), then
//! `--after-stepdown-ms` later a server holding a replica (not the stream's leader) is
//! killed, removed from the meta group (`SERVER.REMOVE`), wiped and started again under a
//! new name. From then on, every second, the stream is asked again for R4 (`STREAM.UPDATE`
//! with its own configuration) and looked at, until the update is accepted and the stream
//! has four servers, or `--observe` seconds. It *shows it* when 10005 was answered for at
//! least `--stall` seconds.

use clap::Parser;
use findings::r1_move::{self, Writes};
use findings::{api, stream_config, Cluster};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const ID: &str = "scale-refused-after-server-replaced";

/// Right after a meta leader change, a server holding a replica of an R4 stream is removed and comes back wiped under a new name: how long does the stream's R4 update (the same configuration, asked again) get 10005 "no suitable peers for placement"? See README.md beside this file.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trials: findings::Trials,
    /// Messages in the stream before the publisher starts.
    #[arg(long, default_value_t = 20_000)]
    backlog: u64,
    /// Milliseconds from the meta leader stepdown to the server's removal.
    #[arg(long, default_value_t = 1500)]
    after_stepdown_ms: u64,
    /// No meta leader stepdown before the removal.
    #[arg(long)]
    control: bool,
    /// Seconds the one server without a replica (the only possible replacement) is down,
    /// ending just before the stepdown (0: left alone). In the soak that met it, that
    /// server had been cut off until 15 s before.
    #[arg(long, default_value_t = 0)]
    spare_down: u64,
    /// Create the stream with one replica and scale it to four just before the stepdown,
    /// so the replica is removed while the scale is still copying.
    #[arg(long)]
    from_r1: bool,
    /// Seconds watched after the removal, at most.
    #[arg(long, default_value_t = 150)]
    observe: u64,
    /// Seconds of 10005 answers that count as showing it.
    #[arg(long, default_value_t = 20.0)]
    stall: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let args = &args;
    args.trials.run(ID, |dir| async move {
        let details = run_trial(args, &dir).await?;
        Ok((details["refused_10005_s"].as_f64().unwrap_or(0.0) >= args.stall, details))
    })
    .await
}

async fn run_trial(args: &Args, dir: &std::path::Path) -> anyhow::Result<Value> {
    let mut cluster = Cluster::start(&args.trials.server, 5, dir, false).await?;
    let client = async_nats::ConnectOptions::new().connect(cluster.urls()).await?;
    let system = cluster.system_client().await?;
    let config = stream_config("S", "s", 4);
    let first = stream_config("S", "s", if args.from_r1 { 1 } else { 4 });
    findings::retry(|| api(&client, "STREAM.CREATE.S", &first)).await?;
    r1_move::fill(&client, args.backlog, 128).await?;
    if args.from_r1 {
        findings::retry(|| api(&client, "STREAM.UPDATE.S", &config)).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let info = findings::retry(|| api(&client, "STREAM.INFO.S", &Value::Null)).await?;
    // A replica that is not the leader: its removal needs a replacement, not an election.
    let victim = info["cluster"]["replicas"].as_array().and_then(|r| r.first()).and_then(|r| r["name"].as_str()).unwrap_or("").to_string();
    let Some(i) = cluster.nodes.iter().position(|n| n.name == victim) else { anyhow::bail!("no replica to remove in {info}") };

    let zero = Instant::now() + Duration::from_secs(2);
    let clock = r1_move::clock(zero);
    let writes = Writes::start(client.clone(), 16, 128, args.backlog + 1, clock);
    tokio::time::sleep_until(zero.into()).await;
    let mut events = Vec::new();
    let holders = findings::servers_of(&info);
    if args.spare_down > 0 {
        if let Some(j) = cluster.nodes.iter().position(|n| !holders.contains(&n.name)) {
            cluster.kill(j);
            tokio::time::sleep(Duration::from_secs(args.spare_down)).await;
            cluster.restart(j)?;
            events.push(json!({ "t_s": clock(), "event": format!("{} down for {} s, restarted", cluster.nodes[j].name, args.spare_down) }));
        }
    }
    if !args.control {
        let answer = api(&system, "META.LEADER.STEPDOWN", &Value::Null).await;
        events.push(json!({ "t_s": clock(), "event": "meta leader stepdown", "error": answer.err().map(|e| e.to_string()) }));
        tokio::time::sleep(Duration::from_millis(args.after_stepdown_ms)).await;
    }
    cluster.kill(i);
    let body = json!({ "peer": victim });
    let removed = findings::retry(|| api(&system, "SERVER.REMOVE", &body)).await;
    let new_name = format!("{victim}-2");
    cluster.wipe_and_rename(i, &new_name)?;
    let removed_at = clock();
    events.push(json!({ "t_s": removed_at, "event": format!("{victim} removed, back as {new_name}"), "error": removed.err().map(|e| e.to_string()) }));

    // Every second: the same R4 configuration asked again, and the stream's servers.
    let (mut first_10005, mut last_10005, mut accepted_at) = (None::<f64>, None::<f64>, None::<f64>);
    let mut last = Value::Null;
    while clock() < removed_at + args.observe as f64 {
        let answer = api(&client, "STREAM.UPDATE.S", &config).await;
        let t = clock();
        match &answer {
            Err(e) if e.code == 10005 => {
                first_10005.get_or_insert(t);
                last_10005 = Some(t);
            }
            Ok(_) => {
                accepted_at.get_or_insert(t);
            }
            Err(_) => {}
        }
        let peers = api(&client, "STREAM.INFO.S", &Value::Null).await.map(|info| findings::servers_of(&info)).unwrap_or_default();
        let now = json!({ "update": answer.err().map(|e| e.to_string()), "servers": peers });
        if now != last {
            events.push(json!({ "t_s": t, "seen": now }));
            last = now;
        }
        if accepted_at.is_some() && peers.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let writes = writes.stop(clock());
    let refused = match (first_10005, last_10005) {
        (Some(a), Some(b)) => b - a,
        _ => 0.0,
    };
    if refused >= args.stall {
        let lines = cluster.log_lines(&["could not replace", "metadata leader", "> S'", "remapping", "peer"]);
        std::fs::write(dir.join("server-lines.txt"), lines.join("\n"))?;
    }
    Ok(json!({ "victim": victim, "stepdown": !args.control, "refused_10005_s": refused, "first_10005_s": first_10005, "accepted_at_s": accepted_at,
               "writes": writes, "events": events, "dir": dir }))
}
