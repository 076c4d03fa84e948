//! What every reproducer needs, and nothing of the workload's: a nats-server cluster of
//! child processes on loopback, the raw JetStream API, and a place for a trial's output.
//!
//! Each reproducer is one file under `findings/<id>/` that starts its own cluster per trial,
//! drives it with async-nats only, and prints one JSON line per trial and a summary.

pub mod r1_move;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One nats-server process, with its ports and store kept for its whole life (a restart
/// comes back at the same address with the same data).
pub struct Node {
    pub name: String,
    pub port: u16,
    pub http: u16,
    pub route: u16,
    pub store: PathBuf,
    pub log: PathBuf,
    config: PathBuf,
    child: Option<Child>,
}

impl Node {
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self, bin: &Path) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new(bin)
            .arg("-c")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    pub dir: PathBuf,
    bin: PathBuf,
}

/// Ports the kernel hands out now; nats-server is then told to listen on them.
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners: Vec<std::net::TcpListener> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    Ok(listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<Result<_, _>>()?)
}

impl Cluster {
    /// `n` nodes named n1..nN under `dir` (emptied first), every write fsynced
    /// (`sync_interval: always`), a system account `sys:sys`, clients without credentials
    /// in account APP. With `tags`, node i carries tag `t<i>` (for placement moves).
    pub async fn start(bin: &Path, n: usize, dir: &Path, tags: bool) -> anyhow::Result<Cluster> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        let ports = free_ports(3 * n)?;
        let routes: Vec<String> = (0..n).map(|i| format!("\"nats-route://127.0.0.1:{}\"", ports[3 * i + 2])).collect();
        let mut nodes = Vec::new();
        for i in 0..n {
            let name = format!("n{}", i + 1);
            let (port, http, route) = (ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]);
            let store = dir.join(&name).join("store");
            std::fs::create_dir_all(&store)?;
            let tag = if tags { format!("server_tags: [\"t{}\"]\n", i + 1) } else { String::new() };
            let text = format!(
                "server_name: {name}\nlisten: 127.0.0.1:{port}\nhttp: 127.0.0.1:{http}\n{tag}\
                 jetstream {{ store_dir: \"{}\", sync_interval: always }}\n\
                 cluster {{ name: repro, listen: 127.0.0.1:{route}, routes: [{}] }}\n\
                 accounts {{ SYS {{ users: [{{ user: sys, password: sys }}] }}, APP {{ jetstream: enabled, users: [{{ user: app, password: app }}] }} }}\n\
                 system_account: SYS\nno_auth_user: app\n",
                store.display(),
                routes.join(", ")
            );
            let config = dir.join(&name).join("node.conf");
            std::fs::write(&config, text)?;
            nodes.push(Node { name: name.clone(), port, http, route, store, log: dir.join(&name).join("node.log"), config, child: None });
        }
        let mut cluster = Cluster { nodes, dir: dir.to_path_buf(), bin: bin.to_path_buf() };
        for node in &mut cluster.nodes {
            node.spawn(bin)?;
        }
        cluster.wait_healthy(Duration::from_secs(60)).await?;
        Ok(cluster)
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// Every node answers its full `/healthz` with 200, within `within`.
    pub async fn wait_healthy(&self, within: Duration) -> anyhow::Result<()> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
        let deadline = Instant::now() + within;
        loop {
            let mut sick = Vec::new();
            for n in &self.nodes {
                let ok = http.get(format!("http://127.0.0.1:{}/healthz", n.http)).send().await.is_ok_and(|r| r.status().is_success());
                if !ok {
                    sick.push(n.name.clone());
                }
            }
            if sick.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("not healthy within {within:?}: {sick:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// SIGKILL node `i` (its store stays).
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].stop();
    }

    /// Starts node `i` again with its own store and ports.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].stop();
        self.nodes[i].spawn(&self.bin)
    }

    /// Stops node `i`, wipes its store and starts it again under `name` (same ports): a
    /// server replaced by a new one, as after `SERVER.REMOVE` of the old name.
    pub fn wipe_and_rename(&mut self, i: usize, name: &str) -> anyhow::Result<()> {
        let node = &mut self.nodes[i];
        node.stop();
        std::fs::remove_dir_all(&node.store)?;
        std::fs::create_dir_all(&node.store)?;
        let text = std::fs::read_to_string(&node.config)?.replacen(&format!("server_name: {}\n", node.name), &format!("server_name: {name}\n"), 1);
        std::fs::write(&node.config, text)?;
        node.name = name.to_string();
        node.spawn(&self.bin)
    }

    /// A client of the system account (user `sys`), for the meta group's API.
    pub async fn system_client(&self) -> anyhow::Result<async_nats::Client> {
        Ok(async_nats::ConnectOptions::with_user_and_password("sys".into(), "sys".into()).connect(self.urls()).await?)
    }

    /// Log lines of every node containing any of `needles`, prefixed with the node's name.
    pub fn log_lines(&self, needles: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        for n in &self.nodes {
            let text = std::fs::read_to_string(&n.log).unwrap_or_default();
            out.extend(text.lines().filter(|l| needles.iter().any(|w| l.contains(w))).map(|l| format!("{}: {l}", n.name)));
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.stop();
        }
    }
}

/// The version a nats-server binary reports (`nats-server --version`: "nats-server: v2.15.1").
pub fn server_version(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().rsplit('v').next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// A JetStream API reply that carries an error.
#[derive(Debug)]
pub struct ApiError {
    pub code: u64,
    pub description: String,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code, self.description)
    }
}

impl std::error::Error for ApiError {}

/// `$JS.API.<what>` with a JSON body; the reply, or its error (code 0: no reply at all).
pub async fn api(client: &async_nats::Client, what: &str, body: &Value) -> Result<Value, ApiError> {
    let payload = if body.is_null() { bytes::Bytes::new() } else { body.to_string().into() };
    let reply = tokio::time::timeout(Duration::from_secs(5), client.request(format!("$JS.API.{what}"), payload)).await;
    let msg = match reply {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => return Err(ApiError { code: 0, description: e.to_string() }),
        Err(_) => return Err(ApiError { code: 0, description: "timed out".into() }),
    };
    let v: Value = serde_json::from_slice(&msg.payload).map_err(|e| ApiError { code: 0, description: e.to_string() })?;
    match v.get("error") {
        Some(e) => Err(ApiError { code: e["err_code"].as_u64().unwrap_or(0), description: e["description"].as_str().unwrap_or("").to_string() }),
        None => Ok(v),
    }
}

/// Asks until the cluster answers, for at most 30 s (a fresh cluster may still be electing).
pub async fn retry<F: std::future::Future<Output = Result<Value, ApiError>>>(mut f: impl FnMut() -> F) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => bail!("{e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// The servers holding a stream, from its `STREAM.INFO`: the leader and every replica,
/// sorted.
pub fn servers_of(info: &Value) -> Vec<String> {
    let cluster = &info["cluster"];
    let replicas = cluster["replicas"].as_array().into_iter().flatten().map(|r| &r["name"]);
    let mut names: Vec<String> = std::iter::once(&cluster["leader"]).chain(replicas).filter_map(|n| n.as_str().map(str::to_string)).collect();
    names.sort();
    names
}

/// A stream of one subject, file storage, `replicas` copies.
pub fn stream_config(name: &str, subject: &str, replicas: usize) -> Value {
    json!({ "name": name, "subjects": [subject], "storage": "file", "num_replicas": replicas, "duplicate_window": 120_000_000_000u64 })
}

/// What every reproducer is given: the server, how many trials, where their clusters go.
#[derive(clap::Args, Debug, Clone)]
pub struct Trials {
    /// nats-server binary (scripts/install-nats-server puts one in .venv/bin; NATS_SERVER_VERSION picks the release).
    #[arg(long, env = "NATS_SERVER", default_value = ".venv/bin/nats-server")]
    pub server: PathBuf,
    /// Independent trials, each on a fresh cluster.
    #[arg(long, default_value_t = 10)]
    pub trials: usize,
    /// Where each trial's cluster (configs, stores, logs) goes
    /// (`<id>-<version>-<unix seconds at start>-<trial>`); a trial that shows the bug keeps
    /// its directory, the others are removed.
    #[arg(long, default_value = "runs/findings")]
    pub dir: PathBuf,
}

impl Trials {
    /// Runs `trial` (given its cluster directory) `--trials` times: one JSON line per trial
    /// (whether it showed the issue, and its details), a summary line, and on stderr how
    /// many of how many. A trial that did not show it has its directory removed.
    pub async fn run<F: std::future::Future<Output = anyhow::Result<(bool, Value)>>>(&self, id: &str, mut trial: impl FnMut(PathBuf) -> F) -> anyhow::Result<()> {
        let version = server_version(&self.server);
        // Each invocation's trials get their own directories: a later batch's trial N that
        // shows nothing (and is removed) must not take an earlier batch's trial N with it.
        let batch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut showed = 0;
        for n in 1..=self.trials {
            let dir = self.dir.join(format!("{id}-{version}-{batch}-{n}"));
            let (reproduced, details) = trial(dir.clone()).await?;
            showed += usize::from(reproduced);
            println!("{}", json!({ "finding": id, "server": version, "trial": n, "reproduced": reproduced, "details": details }));
            if !reproduced {
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
        println!("{}", json!({ "finding": id, "server": version, "reproduced_in": showed, "trials": self.trials }));
        eprintln!("{id} on nats-server {version}: reproduced in {showed} of {} trials", self.trials);
        Ok(())
    }
}
