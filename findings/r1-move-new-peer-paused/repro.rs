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
use findings::r1_move::MoveTrial;
use serde_json::{json, Value};

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
        let paused = details["quorum_paused"].as_array().is_some_and(|l| !l.is_empty());
        Ok((args.t.stalled(&details["writes"]) && paused, details))
    })
    .await
}

async fn run_trial(args: &Args, dir: &std::path::Path) -> anyhow::Result<Value> {
    let mut trial = args.t.start(&args.trials.server, dir, 1).await?;
    let (moved_from, asked) = trial.move_off(args.t.move_by_tags).await;
    let seen = trial.finish(&args.t, moved_from.as_deref()).await?;
    let paused: Vec<&String> = seen.lines.iter().filter(|l| l.contains("Quorum paused")).collect();
    Ok(json!({ "nodes": args.t.nodes, "backlog": args.t.backlog, "asked": asked, "writes": seen.writes, "stream": seen.stream,
               "quorum_paused": paused, "dir": dir }))
}
