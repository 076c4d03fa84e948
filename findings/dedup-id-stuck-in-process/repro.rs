//! A message id stays "in process" (10158) after a stream is scaled to one replica and
//! its one server is evacuated at once: every retry of the publish that the scale dropped
//! is refused until the move has carried the stream over. See README.md beside this file.
//!
//! Per trial: a fresh cluster of `--nodes`; stream `S` (R3, file) filled with `--backlog`
//! messages; then one publisher sends message `i` with `Nats-Msg-Id: m-<i>` and
//! `Nats-Expected-Last-Sequence: i - 1`, `--depth` in flight, and on any failure sends
//! again from the first unacknowledged message under the same ids. After `--warmup`
//! seconds the stream is scaled to R1 and, `--evacuate-after-ms` later, its one server is
//! evacuated (`STREAM.PEER.EVACUATE`, 2.15; `--move-by-tags` moves it by placement tags
//! instead; `--control` leaves it out). The trial watches
//! until the move has settled and `--after-settle` seconds more (at most `--observe`): the
//! longest time without an ack since the scale and the errors met in it, the longest time
//! the stream had no leader, and its placement. It *shows it* when no ack came for at
//! least `--stall` seconds and 10158 was answered through all of that but its first 10 s
//! (the dropped publish's own ack timeout, 5 s, comes first).

use clap::Parser;
use findings::api;
use findings::r1_move::MoveTrial;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const ID: &str = "dedup-id-stuck-in-process";

/// A scale to one replica and, at once, an evacuation of its server, under a publisher with ids:
/// how long are writes refused 10158 "in process"?
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trials: findings::Trials,
    #[command(flatten)]
    t: MoveTrial,
    /// Milliseconds from the scale request to the evacuation request.
    #[arg(long, default_value_t = 1000)]
    evacuate_after_ms: u64,
    /// Scale to R1 only, no evacuation.
    #[arg(long)]
    control: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let args = &args;
    args.trials.run(ID, |dir| async move {
        let details = run_trial(args, &dir).await?;
        Ok((args.t.stuck_in_process(&details["writes"]), details))
    })
    .await
}

async fn run_trial(args: &Args, dir: &std::path::Path) -> anyhow::Result<Value> {
    let mut trial = args.t.start(&args.trials.server, dir, 3).await?;
    let scale_at = Instant::now();
    trial.config["num_replicas"] = json!(1);
    let answer = api(&trial.client, "STREAM.UPDATE.S", &trial.config).await;
    let mut asked = vec![json!({ "t_s": trial.now(), "event": "scale 3 -> 1", "error": answer.err().map(|e| e.to_string()) })];
    let mut moved_from = None;
    if !args.control {
        tokio::time::sleep_until((scale_at + Duration::from_millis(args.evacuate_after_ms)).into()).await;
        // The one server left once the scale has taken.
        let (from, event) = trial.move_off(args.t.move_by_tags).await;
        asked.push(event);
        moved_from = from;
    }
    let seen = trial.finish(&args.t, moved_from.as_deref()).await?;
    Ok(json!({ "nodes": args.t.nodes, "backlog": args.t.backlog, "evacuate_after_ms": (!args.control).then_some(args.evacuate_after_ms),
               "asked": asked, "writes": seen.writes, "stream": seen.stream, "dir": dir }))
}
