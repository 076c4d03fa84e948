//! The same stuck message id without a scale to one replica: a one-replica stream is
//! evacuated to another server, and once the move has settled there it is scaled up to two
//! replicas under the same leader. See README.md beside this file.
//!
//! Per trial: a fresh cluster of `--nodes`; stream `S` (R1, file) filled with `--backlog`
//! messages; the publisher of `repro.rs` (ids, expected last sequence, `--depth` in flight,
//! resends under the same ids). After `--warmup` seconds the stream's server is evacuated
//! (`STREAM.PEER.EVACUATE`, 2.15); once the stream sits on one other server (looked at every
//! 100 ms), `--scale-up-after-ms` later it is scaled to R2 (`--control` leaves the scale
//! out). The trial watches for `--observe` seconds from the evacuation: the longest time
//! without an ack and the errors met in it. It *shows it* when no ack came for at least
//! `--stall` seconds and 10158 was answered through all of that but its first 10 s.

use clap::Parser;
use findings::api;
use findings::r1_move::MoveTrial;
use serde_json::{json, Value};
use std::time::Duration;

const ID: &str = "dedup-id-stuck-in-process-after-move";

/// A one-replica stream evacuated and, once moved, scaled up: how long are writes refused
/// 10158 "in process"?
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trials: findings::Trials,
    #[command(flatten)]
    t: MoveTrial,
    /// Milliseconds from the move's settling (seen) to the scale up.
    #[arg(long, default_value_t = 1000)]
    scale_up_after_ms: u64,
    /// The move alone, no scale up.
    #[arg(long)]
    control: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(!args.t.move_by_tags, "a scale up after a move by tags would move the stream again: evacuation only (2.15)");
    let args = &args;
    args.trials.run(ID, |dir| async move {
        let details = run_trial(args, &dir).await?;
        Ok((args.t.stuck_in_process(&details["writes"]), details))
    })
    .await
}

async fn run_trial(args: &Args, dir: &std::path::Path) -> anyhow::Result<Value> {
    let mut trial = args.t.start(&args.trials.server, dir, 1).await?;
    let (from, event) = trial.move_off(false).await;
    let mut asked = vec![event];
    let settled = match &from {
        Some(from) => trial.alone_off(from, Duration::from_secs(args.t.observe)).await.then(|| trial.now()),
        None => None,
    };
    if let (Some(_), false) = (settled, args.control) {
        tokio::time::sleep(Duration::from_millis(args.scale_up_after_ms)).await;
        trial.config["num_replicas"] = json!(2);
        let answer = api(&trial.client, "STREAM.UPDATE.S", &trial.config).await;
        asked.push(json!({ "t_s": trial.now(), "event": "scale 1 -> 2", "error": answer.err().map(|e| e.to_string()) }));
    }
    // Not "settled" again (two replicas): watched for --observe seconds.
    let seen = trial.finish(&args.t, None).await?;
    Ok(json!({ "nodes": args.t.nodes, "backlog": args.t.backlog, "scale_up_after_ms": (!args.control).then_some(args.scale_up_after_ms),
               "move_settled_s": settled, "asked": asked, "writes": seen.writes, "stream": seen.stream, "dir": dir }))
}
