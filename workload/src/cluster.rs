//! A real nats-server cluster as child processes on 127.0.0.1, and `/healthz` checks.
//!
//! Each node keeps its name, ports and data dir for its whole life, so a later fault
//! injector can kill and restart it in place. Nodes die with the workload: they are killed
//! on drop and, through PR_SET_PDEATHSIG, when the workload itself is killed.

use anyhow::{bail, Context};
use std::fs;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Node {
    pub name: String,
    pub client_port: u16,
    pub cluster_port: u16,
    pub http_port: u16,
    pub config_file: PathBuf,
    pub log_file: PathBuf,
    child: Option<Child>,
}

pub struct LocalCluster {
    pub nodes: Vec<Node>,
    pub server_bin: PathBuf,
}

impl Node {
    pub fn client_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    pub fn monitor_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts the node's process (again) with its own config, ports and data dir.
    pub fn start(&mut self, server_bin: &Path) -> anyhow::Result<()> {
        let log = fs::OpenOptions::new().create(true).append(true).open(&self.log_file)?;
        let mut cmd = Command::new(server_bin);
        cmd.arg("-c").arg(&self.config_file).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let child = cmd.spawn().with_context(|| format!("cannot start {}", server_bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process has exited on its own.
    pub fn exited(&mut self) -> bool {
        self.child.as_mut().is_none_or(|c| !matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `n` free TCP ports on 127.0.0.1, all held until every one is chosen.
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    Ok(listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<Result<_, _>>()?)
}

impl LocalCluster {
    /// Writes configs under `dir` and starts `n` nodes. Does not wait for health.
    pub fn start(server_bin: &Path, n: usize, dir: &Path) -> anyhow::Result<LocalCluster> {
        if n == 0 {
            bail!("a cluster needs at least one node");
        }
        let dir = std::path::absolute(dir)?;
        fs::create_dir_all(&dir)?;
        let ports = free_ports(3 * n)?;
        let mut nodes: Vec<Node> = (0..n)
            .map(|i| Node {
                name: format!("n{}", i + 1),
                client_port: ports[3 * i],
                cluster_port: ports[3 * i + 1],
                http_port: ports[3 * i + 2],
                config_file: dir.join(format!("n{}.conf", i + 1)),
                log_file: dir.join(format!("n{}.log", i + 1)),
                child: None,
            })
            .collect();
        let routes: Vec<String> = nodes.iter().map(|n| format!("\"nats-route://127.0.0.1:{}\"", n.cluster_port)).collect();
        for node in &nodes {
            let store = dir.join(&node.name).join("jetstream");
            fs::create_dir_all(&store)?;
            let conf = format!(
                "server_name: {name}\nlisten: \"127.0.0.1:{client}\"\nhttp: \"127.0.0.1:{http}\"\n\
                 jetstream {{\n  store_dir: \"{store}\"\n  sync_interval: always\n}}\n\
                 cluster {{\n  name: workload\n  listen: \"127.0.0.1:{cluster}\"\n  routes: [{routes}]\n}}\n",
                name = node.name,
                client = node.client_port,
                http = node.http_port,
                cluster = node.cluster_port,
                store = store.display(),
                routes = routes.join(", "),
            );
            fs::write(&node.config_file, conf)?;
        }
        for node in &mut nodes {
            node.start(server_bin)?;
        }
        Ok(LocalCluster { nodes, server_bin: server_bin.to_path_buf() })
    }

    pub fn client_urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::client_url).collect()
    }

    pub fn monitor_urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::monitor_url).collect()
    }

    /// Waits until every node answers `/healthz` with 200, or fails naming the laggards.
    pub async fn wait_healthy(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let http = http_client();
        loop {
            if let Some(node) = self.nodes.iter_mut().find_map(|n| n.exited().then_some(&*n)) {
                bail!("nats-server {} exited during start-up; see {}", node.name, node.log_file.display());
            }
            let sick = unhealthy(&http, &self.monitor_urls()).await;
            if sick.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("nodes not healthy after {timeout:?}: {}", sick.join(", "));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("a plain HTTP client always builds")
}

/// The monitoring URLs whose full `/healthz` does not answer 200.
pub async fn unhealthy(http: &reqwest::Client, monitor_urls: &[String]) -> Vec<String> {
    let checks = monitor_urls.iter().map(|url| async move {
        let ok = matches!(http.get(format!("{url}/healthz")).send().await, Ok(r) if r.status().is_success());
        (!ok).then(|| url.clone())
    });
    futures::future::join_all(checks).await.into_iter().flatten().collect()
}

/// The `nats-server` to run: the flag, else `$NATS_SERVER`, else the project venv's, else PATH.
pub fn find_server(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("NATS_SERVER") {
        return Ok(PathBuf::from(p));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/nats-server");
    if venv.exists() {
        return Ok(venv);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("nats-server"))
        .find(|p| p.exists());
    on_path.context("no nats-server found: pass --nats-server, set NATS_SERVER, or run scripts/install-nats-server")
}

/// `nats-server --version`, e.g. "v2.15.1".
pub fn server_version(bin: &Path) -> Option<String> {
    let out = Command::new(bin).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().last().map(str::to_string)
}
