//! A follower whose Raft snapshot of the stream was damaged while its server was down: is
//! it rebuilt from the other two copies, or kept out of the stream's group? See README.md
//! beside this file.
//!
//! Per trial: a fresh 3-node cluster, stream `S` (R3, file) on `s`, published to until the
//! follower chosen holds a snapshot of the stream's Raft group (`_js_/S-*/snapshots/snap.*`,
//! taken by the server as its log grows; at most `--wait` seconds); then that follower is
//! killed, bits of its newest snapshot flipped, and the follower started again. Its full
//! `/healthz` is read for `--settle` seconds: a node still unhealthy then, with the server
//! saying "snapshot corrupt", was kept out.

use clap::Parser;
use findings::{api, Cluster};
use serde_json::{json, Value};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ID: &str = "corrupt-snapshot-kept-out";

/// A follower whose Raft snapshot of the stream was damaged while its server was down: is it rebuilt from the other two copies, or kept out of the stream's group? See README.md beside this file.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trials: findings::Trials,
    /// Seconds of publishing to wait for the follower's first snapshot.
    #[arg(long, default_value_t = 300)]
    wait: u64,
    /// Seconds given to the damaged node to come back.
    #[arg(long, default_value_t = 90)]
    settle: u64,
    /// Kill and restart the follower without touching its snapshot: the control, which
    /// must come back healthy, so that staying out is the damage's doing.
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
            Ok((details["kept_out"] == true, details))
        })
        .await
}

/// The newest snapshot of the stream's Raft group in a node's store.
fn newest_snapshot(store: &Path) -> Option<PathBuf> {
    let groups = std::fs::read_dir(store.join("jetstream/SYS/_js_")).ok()?;
    let snaps = groups.flatten().filter(|g| g.file_name().to_string_lossy().starts_with("S-")).flat_map(|g| std::fs::read_dir(g.path().join("snapshots")).into_iter().flatten().flatten());
    snaps.map(|e| e.path()).max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
}

/// Flips one bit in each of three bytes spread over the file.
fn flip(file: &Path) -> std::io::Result<u64> {
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(file)?;
    let size = f.metadata()?.len();
    for offset in [size / 4, size / 2, 3 * size / 4] {
        let mut b = [0u8];
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(&mut b)?;
        b[0] ^= 0x10;
        f.seek(SeekFrom::Start(offset))?;
        f.write_all(&b)?;
    }
    f.sync_all()?;
    Ok(size)
}

async fn run_trial(args: &Args, dir: &Path) -> anyhow::Result<Value> {
    let mut cluster = Cluster::start(&args.trials.server, 3, dir, false).await?;
    let client = async_nats::ConnectOptions::new().retry_on_initial_connect().connect(cluster.urls()).await?;
    let config = findings::stream_config("S", "s", 3);
    findings::retry(|| api(&client, "STREAM.CREATE.S", &config)).await?;
    let js = async_nats::jetstream::new(client.clone());
    let info = findings::retry(|| api(&client, "STREAM.INFO.S", &Value::Null)).await?;
    let leader = info["cluster"]["leader"].as_str().unwrap_or_default().to_string();
    let victim = cluster.nodes.iter().position(|n| n.name != leader).unwrap_or(0);
    let name = cluster.nodes[victim].name.clone();
    // Publish until the follower holds a snapshot.
    let started = Instant::now();
    let mut published = 0u64;
    let snapshot = loop {
        if let Some(s) = newest_snapshot(&cluster.nodes[victim].store) {
            break Some(s);
        }
        if started.elapsed() > Duration::from_secs(args.wait) {
            break None;
        }
        let mut acks = Vec::new();
        for _ in 0..256 {
            acks.push(js.send_publish("s", async_nats::jetstream::message::PublishMessage::build().payload(vec![b'x'; 128].into())).await?);
        }
        for a in acks {
            if a.await.is_ok() {
                published += 1;
            }
        }
    };
    let Some(snapshot) = snapshot else {
        return Ok(json!({ "kept_out": false, "published": published, "problem": format!("no snapshot on {name} within {} s", args.wait) }));
    };
    cluster.kill(victim);
    let size = if args.control { std::fs::metadata(&snapshot)?.len() } else { flip(&snapshot)? };
    cluster.restart(victim)?;
    let restarted = std::time::Instant::now();
    let came_back = cluster.wait_healthy(Duration::from_secs(args.settle)).await;
    let healthy_after = came_back.is_ok().then(|| (restarted.elapsed().as_secs_f64() * 10.0).round() / 10.0);
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
    let health = match http.get(format!("http://127.0.0.1:{}/healthz", cluster.nodes[victim].http)).send().await {
        Ok(r) => format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
        Err(e) => e.to_string(),
    };
    // What each release says of the damaged snapshot (2.14+: "Snapshot corrupt, checksums
    // did not match" and "raft: snapshot corrupt"; 2.12.1 the first, then it recovers).
    // Capitalised: the trial's own directory name holds "snapshot".
    let lines = cluster.log_lines(&["Snapshot ", "snapshot corrupt", "stream assignment error", "catchup entry"]);
    let kept_out = came_back.is_err() && health.contains("snapshot corrupt");
    if kept_out {
        std::fs::write(dir.join("server-lines.txt"), lines.join("\n"))?;
    }
    Ok(json!({
        "published": published, "damaged": name, "snapshot": snapshot.strip_prefix(dir).unwrap_or(&snapshot), "snapshot_bytes": size,
        "healthy_after_s": healthy_after, "health_at_end": health, "kept_out": kept_out,
        "server_lines": lines.iter().take(8).collect::<Vec<_>>(), "dir": dir,
    }))
}
