//! Moving a one-replica stream while a publisher goes on: the publisher, the move and the
//! watch, shared by the programs that measure what such a move does to writes
//! (`dedup-id-stuck-in-process`, `r1-move-new-peer-paused`).
//!
//! Times are seconds on a trial's clock: 0 at the operation under test, negative before.

use crate::{api, stream_config, Cluster};
use async_nats::jetstream::{self, message::PublishMessage};
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What both move programs are given besides their trials: the cluster, the load, the move
/// and how long to watch it.
#[derive(clap::Args, Debug, Clone)]
pub struct MoveTrial {
    /// Servers in the cluster.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Messages in the stream before the publisher starts.
    #[arg(long, default_value_t = 200_000)]
    pub backlog: u64,
    /// Bytes per message.
    #[arg(long, default_value_t = 128)]
    pub payload: usize,
    /// Publishes awaiting their acks at once.
    #[arg(long, default_value_t = 16)]
    pub depth: usize,
    /// Seconds of publishing before the operation under test.
    #[arg(long, default_value_t = 5)]
    pub warmup: u64,
    /// Move the stream with placement tags instead of evacuating it (releases before 2.15).
    #[arg(long)]
    pub move_by_tags: bool,
    /// Seconds watched after the operation under test, at most.
    #[arg(long, default_value_t = 300)]
    pub observe: u64,
    /// Seconds watched once the move has settled.
    #[arg(long, default_value_t = 30)]
    pub after_settle: u64,
    /// Seconds without an ack that count as showing it.
    #[arg(long, default_value_t = 20.0)]
    pub stall: f64,
}

impl MoveTrial {
    /// A fresh cluster with stream `S` of `replicas` filled with `--backlog` messages, and
    /// the publisher started; returns once `--warmup` seconds of publishing have passed,
    /// the moment the operation under test is due (0 on the trial's clock).
    pub async fn start(&self, server: &Path, dir: &Path, replicas: usize) -> anyhow::Result<Trial> {
        let cluster = Cluster::start(server, self.nodes, dir, true).await?;
        let client = async_nats::ConnectOptions::new().connect(cluster.urls()).await?;
        let config = stream_config("S", "s", replicas);
        crate::retry(|| api(&client, "STREAM.CREATE.S", &config)).await?;
        fill(&client, self.backlog, self.payload).await?;
        let zero = Instant::now() + Duration::from_secs(self.warmup);
        let writes = Writes::start(client.clone(), self.depth, self.payload, self.backlog + 1, clock(zero));
        tokio::time::sleep_until(zero.into()).await;
        Ok(Trial { cluster, client, config, zero, writes })
    }

    /// Whether a `Writes::stop` summary went `--stall` seconds without an ack.
    pub fn stalled(&self, writes: &Value) -> bool {
        writes["longest_without_ack_s"].as_f64().unwrap_or(0.0) >= self.stall
    }

    /// Whether it stalled with 10158 "in process" answered through all of that but its
    /// first 10 s (the dropped publish's own ack timeout, 5 s, comes first).
    pub fn stuck_in_process(&self, writes: &Value) -> bool {
        self.stalled(writes) && answered_for(writes, "Other 10158") >= self.stall - 10.0
    }
}

/// A trial under way (`MoveTrial::start`): its cluster, a client, the stream's
/// configuration as last asked for, and the publisher.
pub struct Trial {
    pub cluster: Cluster,
    pub client: async_nats::Client,
    pub config: Value,
    zero: Instant,
    writes: Writes,
}

/// What a trial saw once it was watched to its end (`Trial::finish`).
pub struct Watched {
    /// The publisher's summary (`Writes::stop`).
    pub writes: Value,
    /// The stream's placement as it changed (`watch`).
    pub stream: Value,
    /// The servers' log lines about the stream's group, its copies and its quorum.
    pub lines: Vec<String>,
}

impl Trial {
    /// Seconds on the trial's clock.
    pub fn now(&self) -> f64 {
        clock(self.zero)()
    }

    /// Moves stream `S` off the one server holding it (its leader with no other peer,
    /// asked for at most 5 s): `STREAM.PEER.EVACUATE` (2.15), or with `by_tags` a placement
    /// on the tag of the first other node (node `nK` carries `tK`; releases before 2.15 have
    /// no evacuation). That server, if found, and what was asked and answered, when.
    pub async fn move_off(&mut self, by_tags: bool) -> (Option<String>, Value) {
        let (client, config) = (&self.client, &mut self.config);
        let peer = single_peer(client, Duration::from_secs(5), None).await;
        let mut asked = match &peer {
            None => json!({ "event": "no single peer within 5 s: not moved" }),
            Some(peer) if by_tags => {
                let to = self.cluster.nodes.iter().map(|n| n.name.clone()).find(|n| n != peer).unwrap_or_default();
                config["placement"] = json!({ "tags": [to.replacen('n', "t", 1)] });
                let answer = api(client, "STREAM.UPDATE.S", config).await;
                json!({ "event": format!("move {peer} -> {to}"), "error": answer.err().map(|e| e.to_string()) })
            }
            Some(peer) => {
                let answer = api(client, "STREAM.PEER.EVACUATE.S", &json!({ "peer": peer })).await;
                json!({ "event": format!("evacuate {peer}"), "error": answer.err().map(|e| e.to_string()) })
            }
        };
        asked["t_s"] = json!(self.now());
        (peer, asked)
    }

    /// Waits until stream `S` sits alone on a server other than `from` (at most `within`),
    /// as a move off `from` settles; whether it did.
    pub async fn alone_off(&self, from: &str, within: Duration) -> bool {
        single_peer(&self.client, within, Some(from)).await.is_some()
    }

    /// Watches the stream (`watch`, as `t` says) after a move off `moved_from`, stops the
    /// publisher, and reads the servers' logs; a trial that stalled keeps those lines in
    /// `server-lines.txt` under its directory.
    pub async fn finish(self, t: &MoveTrial, moved_from: Option<&str>) -> anyhow::Result<Watched> {
        let clock = clock(self.zero);
        let stream = watch(&self.client, moved_from, clock, t.observe as f64, t.after_settle as f64).await;
        let writes = self.writes.stop(clock());
        let lines = self.cluster.log_lines(&["> S'", "remapping", "stream leader", "Catchup", "catchup", "stalled", "Quorum"]);
        if t.stalled(&writes) {
            std::fs::write(self.cluster.dir.join("server-lines.txt"), lines.join("\n"))?;
        }
        Ok(Watched { writes, stream, lines })
    }
}

/// Seconds since `zero` (negative before it).
pub fn clock(zero: Instant) -> impl Fn() -> f64 + Copy + Send + 'static {
    move || {
        let now = Instant::now();
        if now >= zero {
            (now - zero).as_secs_f64()
        } else {
            -(zero - now).as_secs_f64()
        }
    }
}

/// `n` messages of `size` bytes into subject `s`, 256 in flight.
pub async fn fill(client: &async_nats::Client, n: u64, size: usize) -> anyhow::Result<()> {
    let js = jetstream::new(client.clone());
    let mut acks = Vec::new();
    for i in 1..=n {
        acks.push(js.send_publish("s", PublishMessage::build().payload(vec![b'x'; size].into())).await?);
        if acks.len() == 256 || i == n {
            for a in acks.drain(..) {
                a.await?;
            }
        }
    }
    Ok(())
}

/// Errors by kind: count, first and last time.
type Errors = BTreeMap<String, (u64, f64, f64)>;

#[derive(Default)]
struct Seen {
    acked: u64,
    last_ack_t: f64,
    /// The longest time without an ack since 0, and the errors met in it.
    longest: (f64, f64),
    longest_errors: Errors,
    /// Errors met since the last ack.
    errors: Errors,
}

/// A publisher into subject `s`: message `i` with `Nats-Msg-Id: m-<i>` and
/// `Nats-Expected-Last-Sequence: i - 1`, `depth` in flight; on any failure it sends again
/// from the first unacknowledged message under the same ids (as a publisher that must keep
/// its stream gap-free does).
pub struct Writes {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Writes {
    /// Starts publishing at message `first` (the stream holds `first - 1`).
    pub fn start(client: async_nats::Client, depth: usize, size: usize, first: u64, clock: impl Fn() -> f64 + Copy + Send + 'static) -> Writes {
        let seen = Arc::new(Mutex::new(Seen { acked: first - 1, last_ack_t: clock(), ..Seen::default() }));
        let task = tokio::spawn(publish(client, depth, size, first, clock, seen.clone()));
        Writes { seen, task }
    }

    /// Stops it, and says what it met since 0: the last message acknowledged, the longest
    /// time without an ack (one still open at `end` counts to `end`) and the errors met in
    /// that time by kind (an API error's kind carries its code: "Other 10158").
    pub fn stop(self, end: f64) -> Value {
        self.task.abort();
        let s = self.seen.lock().unwrap();
        let open = end - s.last_ack_t > s.longest.1 - s.longest.0;
        let ((from, to), errors) = if open { ((s.last_ack_t, end), &s.errors) } else { (s.longest, &s.longest_errors) };
        let errors: serde_json::Map<String, Value> = errors.iter().map(|(k, (n, first, last))| (k.clone(), json!({ "n": n, "first_s": first, "last_s": last }))).collect();
        json!({ "acked": s.acked, "longest_without_ack_s": to - from, "without_ack_from_s": from, "without_ack_to_s": to,
                "still_without_ack_at_end": open, "errors_meanwhile": errors })
    }
}

async fn publish(client: async_nats::Client, depth: usize, size: usize, first: u64, clock: impl Fn() -> f64, seen: Arc<Mutex<Seen>>) -> anyhow::Result<()> {
    let js = jetstream::ContextBuilder::new().timeout(Duration::from_secs(5)).build(client);
    let mut next_ack = first;
    loop {
        let mut in_flight = FuturesOrdered::new();
        let mut next_send = next_ack;
        let failed = loop {
            while in_flight.len() < depth {
                let i = next_send;
                let msg = PublishMessage::build().payload(vec![b'y'; size].into()).message_id(format!("m-{i}")).expected_last_sequence(i - 1);
                match js.send_publish("s", msg).await {
                    Ok(ack) => in_flight.push_back(async move { (i, ack.await) }),
                    Err(e) => {
                        note_error(&seen, clock(), format!("send: {:?}", e.kind()));
                        break;
                    }
                }
                next_send += 1;
            }
            let Some((i, reply)) = in_flight.next().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                break false;
            };
            match reply {
                Ok(ack) if ack.sequence == i => {
                    let t = clock();
                    let mut s = seen.lock().unwrap();
                    let since = s.last_ack_t.max(0.0);
                    if t > 0.0 && t - since > s.longest.1 - s.longest.0 {
                        s.longest = (since, t);
                        s.longest_errors = std::mem::take(&mut s.errors);
                    }
                    s.errors.clear();
                    s.last_ack_t = t;
                    s.acked = i;
                    next_ack = i + 1;
                }
                Ok(ack) => anyhow::bail!("message {i} acknowledged at sequence {}", ack.sequence),
                Err(e) => {
                    // An API error reads "<description> (code <status>, error code <code>)"; the
                    // description may carry numbers of its own ("wrong last sequence: 59705").
                    let source = std::error::Error::source(&e).map(ToString::to_string).unwrap_or_default();
                    let code = source.rsplit_once("error code ").map_or("", |(_, c)| c.trim_end_matches(')'));
                    note_error(&seen, clock(), format!("{:?} {code}", e.kind()).trim().to_string());
                    break true;
                }
            }
        };
        if failed {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn note_error(seen: &Mutex<Seen>, t: f64, kind: String) {
    if t < 0.0 {
        return;
    }
    let mut s = seen.lock().unwrap();
    let e = s.errors.entry(kind).or_insert((0, t, t));
    e.0 += 1;
    e.2 = t;
}

/// The server holding stream `S` alone (its leader, with no other peer; not `other_than`),
/// asked for every 100 ms, at most `within`.
async fn single_peer(client: &async_nats::Client, within: Duration, other_than: Option<&str>) -> Option<String> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(info) = api(client, "STREAM.INFO.S", &Value::Null).await {
            let alone = info["cluster"]["replicas"].as_array().is_none_or(Vec::is_empty);
            if let Some(p) = info["cluster"]["leader"].as_str().filter(|p| alone && !p.is_empty() && Some(*p) != other_than) {
                return Some(p.to_string());
            }
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Watches stream `S` twice a second until it sits on one server other than `moved_from`
/// and `after_settle` seconds more, or until `until` on the clock: its placement as it
/// changes (leader, peers with `current` and `lag`), when the move settled, and the longest
/// time it had no leader or did not answer.
async fn watch(client: &async_nats::Client, moved_from: Option<&str>, clock: impl Fn() -> f64, until: f64, after_settle: f64) -> Value {
    let mut events = Vec::new();
    let mut last = Value::Null;
    let mut settled_at: Option<f64> = None;
    let (mut leaderless_since, mut leaderless): (Option<f64>, (f64, f64)) = (None, (0.0, 0.0));
    while clock() < until && settled_at.is_none_or(|s| clock() < s + after_settle) {
        let now = match api(client, "STREAM.INFO.S", &Value::Null).await {
            Ok(info) => {
                let replicas: Vec<Value> = info["cluster"]["replicas"].as_array().cloned().unwrap_or_default();
                let leader = info["cluster"]["leader"].as_str().unwrap_or("").to_string();
                if settled_at.is_none() && replicas.is_empty() && !leader.is_empty() && moved_from.is_some_and(|m| m != leader) {
                    settled_at = Some(clock());
                }
                let peers: Vec<Value> = replicas.iter().map(|r| json!([r["name"], r["current"], r["lag"]])).collect();
                json!({ "leader": leader, "replicas": peers })
            }
            Err(e) => json!({ "error": e.to_string() }),
        };
        let t = clock();
        if now["leader"].as_str().is_none_or(str::is_empty) {
            let since = *leaderless_since.get_or_insert(t);
            if t - since > leaderless.1 - leaderless.0 {
                leaderless = (since, t);
            }
        } else {
            leaderless_since = None;
        }
        if now != last {
            events.push(json!({ "t_s": t, "info": now }));
            last = now;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    json!({ "settled_at_s": settled_at, "longest_leaderless_s": leaderless.1 - leaderless.0, "leaderless_from_s": leaderless.0,
            "still_leaderless_at_end": leaderless_since.is_some(), "placement": events })
}

/// Seconds between the first and the last answer of `kind` in a `Writes::stop` summary.
fn answered_for(writes: &Value, kind: &str) -> f64 {
    let e = &writes["errors_meanwhile"][kind];
    e["last_s"].as_f64().unwrap_or(0.0) - e["first_s"].as_f64().unwrap_or(0.0)
}
