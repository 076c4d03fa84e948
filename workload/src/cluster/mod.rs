//! A real nats-server cluster as child processes on 127.0.0.1, and `/healthz` checks.
//!
//! Each node keeps its name, ports and data dir for its whole life, so a later fault
//! injector can kill and restart it in place. Nodes die with the workload: they are killed
//! on drop and, through PR_SET_PDEATHSIG, when the workload itself is killed.

pub mod forge;
pub mod lazyfs;
pub mod proxy;

use crate::cluster::lazyfs::Mounted;
use crate::cluster::proxy::Link;
use crate::nats::monitor::{get_json, http_client, unhealthy};
use anyhow::{bail, Context};
use std::fs;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Node {
    pub name: String,
    /// The cluster it belongs to ("workload" when there is one, else c1, c2, ...).
    pub cluster: String,
    pub client_port: u16,
    pub cluster_port: u16,
    pub http_port: u16,
    /// Where other clusters' gateways connect (unused with one cluster).
    pub gateway_port: u16,
    pub config_file: PathBuf,
    pub log_file: PathBuf,
    /// The JetStream store directory (named after the node's first name).
    pub store_dir: PathBuf,
    /// How many times the node came back under a new name.
    pub renamed: u32,
    child: Option<Child>,
}

pub struct LocalCluster {
    pub nodes: Vec<Node>,
    pub server_bin: PathBuf,
    /// The proxied links, when the cluster was started for fault injection.
    pub network: Option<Network>,
    /// Each node's power-loss layer over its store, when the layout asks for them
    /// (unmounted after the nodes are killed: fields drop in order).
    pub disks: Vec<Mounted>,
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
        // PR_SET_PDEATHSIG fires when the forking THREAD ends: nodes are started from the
        // runtime's worker threads (alive as long as the workload), never from
        // spawn_blocking threads, which come and go.
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

    /// Sends `sig` to the running process (false when there is none).
    pub fn signal(&self, sig: nix::sys::signal::Signal) -> bool {
        let Some(pid) = self.pid() else { return false };
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).is_ok()
    }

    /// Waits up to `limit` for the process to exit by itself, then kills it. Reaps it.
    pub async fn wait_exit(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.exited() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.kill();
    }

    /// A stopped node's new identity: its data wiped and its config given the name
    /// `<first name>-<n>`, as an operator replaces a server that was removed from the
    /// cluster (a removed name must not come back). Returns the new name.
    pub fn wipe_and_rename(&mut self) -> anyhow::Result<String> {
        let first = self.name.split('-').next().unwrap_or(&self.name).to_string();
        self.renamed += 1;
        let new = format!("{first}-{}", self.renamed + 1);
        let conf = fs::read_to_string(&self.config_file)?;
        let conf = conf.replacen(&format!("server_name: {}\n", self.name), &format!("server_name: {new}\n"), 1);
        fs::write(&self.config_file, conf)?;
        // Its contents only: the store may be a mount point (the power-loss layer).
        fs::create_dir_all(&self.store_dir)?;
        for entry in fs::read_dir(&self.store_dir)? {
            let path = entry?.path();
            if path.is_dir() { fs::remove_dir_all(&path)? } else { fs::remove_file(&path)? }
        }
        self.name = new.clone();
        Ok(new)
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

/// How many clusters of how many nodes each; several form a supercluster joined by
/// gateways. Node `i` belongs to cluster `i / nodes`. And how the nodes store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub clusters: usize,
    pub nodes: usize,
    /// `sync_interval: always` (fsync every write); else the server's default interval.
    pub sync_always: bool,
    /// Every node's store on a power-loss layer ([`Mounted`]), for the power-loss faults.
    pub power_loss: bool,
}

impl Layout {
    /// One cluster of `nodes`, fsyncing every write, on plain directories.
    pub fn nodes(nodes: usize) -> Self {
        Self { clusters: 1, nodes, sync_always: true, power_loss: false }
    }

    pub fn size(self) -> usize {
        self.clusters * self.nodes
    }

    fn cluster_name(self, i: usize) -> String {
        if self.clusters > 1 { Self::name_of(i / self.nodes.max(1)) } else { "workload".into() }
    }

    fn name_of(c: usize) -> String {
        format!("c{}", c + 1)
    }
}

/// `n` free TCP ports on 127.0.0.1, all held until every one is chosen.
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    Ok(listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<Result<_, _>>()?)
}

/// The proxied links of a local cluster: a client link per node and a route link per
/// ordered pair of nodes. Index with [`Network::route`].
pub struct Network {
    pub clients: Vec<Link>,
    routes: Vec<Vec<Option<Link>>>,
}

impl Network {
    /// The link node `from` dials to reach node `to`.
    pub fn route(&self, from: usize, to: usize) -> Option<&Link> {
        self.routes.get(from)?.get(to)?.as_ref()
    }

    /// Every link touching node `i`: its client link and its routes both ways.
    pub fn links_of(&self, i: usize) -> Vec<&Link> {
        let n = self.clients.len();
        let mut links = vec![&self.clients[i]];
        links.extend((0..n).filter(|j| *j != i).flat_map(|j| [self.route(i, j), self.route(j, i)]).flatten());
        links
    }

    /// The route links crossing between `side` and the other nodes.
    pub fn links_between(&self, side: &[usize]) -> Vec<&Link> {
        let n = self.clients.len();
        let other: Vec<usize> = (0..n).filter(|j| !side.contains(j)).collect();
        side.iter()
            .flat_map(|a| other.iter().flat_map(move |b| [(*a, *b), (*b, *a)]))
            .filter_map(|(a, b)| self.route(a, b))
            .collect()
    }

    /// What cutting `side` off takes: the routes crossing to the other nodes, and the
    /// client links of `side`.
    pub fn partition_links(&self, side: &[usize]) -> Vec<&Link> {
        let mut links = self.links_between(side);
        links.extend(side.iter().map(|j| &self.clients[*j]));
        links
    }

    pub fn heal_all(&self) {
        self.clients.iter().chain(self.routes.iter().flatten().flatten()).for_each(Link::heal);
    }
}

/// The system account the local cluster is configured with (the operator's meta leader
/// stepdowns need it); the application account is the default for clients without
/// credentials, so everything else connects as before.
pub const SYSTEM_USER: &str = "sys";
pub const SYSTEM_PASSWORD: &str = "sys";
const ACCOUNTS: &str = "accounts {\n  SYS: { users: [{ user: sys, password: sys }] }\n  APP: { jetstream: enabled, users: [{ user: app, password: app }] }\n}\nsystem_account: SYS\nno_auth_user: app\n";

/// Placement tags of node `i` (0-based) of `n`: group `g<k>` holds the `size` nodes
/// k, k+1, ... (mod n), with `size` n - 1 up to three nodes and 3 above, so a stream of up
/// to `size` replicas can move between groups that overlap partly.
pub fn group_tags(i: usize, n: usize) -> Vec<String> {
    let size = if n <= 3 { n.saturating_sub(1) } else { 3 };
    if size == 0 {
        return Vec::new();
    }
    (0..n).filter(|k| (0..size).any(|j| (k + j) % n == i)).map(|k| format!("g{k}")).collect()
}

impl LocalCluster {
    /// Writes configs under `dir` and starts `layout`'s nodes. Does not wait for health.
    /// With `proxied`, every route, gateway and client connection goes through a [`Link`]
    /// so the injector can cut or slow it; servers are told not to advertise their real
    /// addresses, so nothing bypasses the links.
    pub async fn start(server_bin: &Path, layout: Layout, dir: &Path, proxied: bool) -> anyhow::Result<LocalCluster> {
        let n = layout.size();
        if n == 0 {
            bail!("a cluster needs at least one node");
        }
        let dir = std::path::absolute(dir)?;
        fs::create_dir_all(&dir)?;
        let ports = free_ports(4 * n)?;
        let mut nodes: Vec<Node> = (0..n)
            .map(|i| Node {
                name: format!("n{}", i + 1),
                cluster: layout.cluster_name(i),
                client_port: ports[4 * i],
                cluster_port: ports[4 * i + 1],
                http_port: ports[4 * i + 2],
                gateway_port: ports[4 * i + 3],
                config_file: dir.join(format!("n{}.conf", i + 1)),
                log_file: dir.join(format!("n{}.log", i + 1)),
                store_dir: dir.join(format!("n{}", i + 1)).join("jetstream"),
                renamed: 0,
                child: None,
            })
            .collect();
        // Node i reaches node j through j's route port in its own cluster, its gateway
        // port in another: one link per ordered pair either way.
        let cluster_of: Vec<String> = nodes.iter().map(|n| n.cluster.clone()).collect();
        let ports_of: Vec<(u16, u16)> = nodes.iter().map(|n| (n.cluster_port, n.gateway_port)).collect();
        let port_for = |i: usize, j: usize| if cluster_of[i] == cluster_of[j] { ports_of[j].0 } else { ports_of[j].1 };
        let network = if proxied {
            let mut clients = Vec::new();
            let mut routes = Vec::new();
            for (i, node) in nodes.iter().enumerate() {
                clients.push(Link::start(format!("client->{}", node.name), node.client_port).await?);
                let mut row = Vec::new();
                for (j, peer) in nodes.iter().enumerate() {
                    row.push(if i == j { None } else { Some(Link::start(format!("{}->{}", node.name, peer.name), port_for(i, j)).await?) });
                }
                routes.push(row);
            }
            Some(Network { clients, routes })
        } else {
            None
        };
        let mut disks = Vec::new();
        for node in nodes.iter().filter(|_| layout.power_loss) {
            let backing = node.store_dir.with_extension("disk");
            disks.push(Mounted::mount(&backing, &node.store_dir).with_context(|| format!("cannot mount the power-loss layer over {} (needs /dev/fuse and fusermount3)", node.store_dir.display()))?);
        }
        for (i, node) in nodes.iter().enumerate() {
            let store = &node.store_dir;
            fs::create_dir_all(store)?;
            let url = |j: usize, scheme: &str| match &network {
                Some(net) => net.route(i, j).map(|l| format!("\"{scheme}://127.0.0.1:{}\"", l.port)),
                None => Some(format!("\"{scheme}://127.0.0.1:{}\"", port_for(i, j))),
            };
            let routes: Vec<String> = (0..n).filter(|j| cluster_of[*j] == node.cluster && !(*j == i && network.is_some())).filter_map(|j| url(j, "nats-route")).collect();
            let gateway = if layout.clusters > 1 {
                let remotes: Vec<String> = (0..layout.clusters)
                    .map(Layout::name_of)
                    .filter(|c| *c != node.cluster)
                    .map(|c| {
                        let urls: Vec<String> = (0..n).filter(|j| cluster_of[*j] == c).filter_map(|j| url(j, "nats")).collect();
                        format!("    {{ name: {c}, urls: [{}] }}", urls.join(", "))
                    })
                    .collect();
                format!(
                    "gateway {{\n  name: {}\n  listen: \"127.0.0.1:{}\"\n{}  gateways: [\n{}\n  ]\n}}\n",
                    node.cluster,
                    node.gateway_port,
                    if proxied { "  advertise: \"127.0.0.1:1\"\n" } else { "" },
                    remotes.join(",\n")
                )
            } else {
                String::new()
            };
            let position = i % layout.nodes;
            let conf = format!(
                "server_name: {name}\nlisten: \"127.0.0.1:{client}\"\nhttp: \"127.0.0.1:{http}\"\nserver_tags: [{tags}]\n{ACCOUNTS}\
                 lame_duck_duration: \"30s\"\nlame_duck_grace_period: \"2s\"\n\
                 jetstream {{\n  store_dir: \"{store}\"\n{sync}}}\n\
                 cluster {{\n  name: {cluster_name}\n  listen: \"127.0.0.1:{cluster}\"\n{advertise}  routes: [{routes}]\n}}\n{gateway}",
                name = node.name,
                tags = group_tags(position, layout.nodes).iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(", "),
                client = node.client_port,
                http = node.http_port,
                cluster_name = node.cluster,
                cluster = node.cluster_port,
                store = store.display(),
                sync = if layout.sync_always { "  sync_interval: always\n" } else { "" },
                routes = routes.join(", "),
                // Proxied: gossip must not teach peers the real route port (they would dial
                // it directly, around the links), nor clients the real client ports.
                advertise = if proxied { "  advertise: \"127.0.0.1:1\"\n  no_advertise: true\n" } else { "" },
            );
            fs::write(&node.config_file, conf)?;
        }
        for node in &mut nodes {
            node.start(server_bin)?;
        }
        Ok(LocalCluster { nodes, server_bin: server_bin.to_path_buf(), network, disks })
    }

    /// Where clients connect: through the client links when proxied.
    pub fn client_urls(&self) -> Vec<String> {
        match &self.network {
            Some(net) => net.clients.iter().map(|l| format!("nats://127.0.0.1:{}", l.port)).collect(),
            None => self.nodes.iter().map(Node::client_url).collect(),
        }
    }

    pub fn monitor_urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::monitor_url).collect()
    }

    /// Starts `n` nodes and waits until every one is healthy. A port chosen free can be
    /// taken by another process before nats-server binds it: when a node exits during
    /// start-up for that reason, the cluster starts again on new ports (three tries).
    pub async fn launch(server_bin: &Path, n: usize, dir: &Path, proxied: bool, timeout: Duration) -> anyhow::Result<LocalCluster> {
        Self::launch_layout(server_bin, Layout::nodes(n), dir, proxied, timeout).await
    }

    /// [`LocalCluster::launch`] for a supercluster of `layout.clusters` clusters.
    pub async fn launch_layout(server_bin: &Path, layout: Layout, dir: &Path, proxied: bool, timeout: Duration) -> anyhow::Result<LocalCluster> {
        let mut attempt = 1;
        loop {
            let mut cluster = Self::start(server_bin, layout, dir, proxied).await?;
            match cluster.wait_healthy(timeout).await {
                Ok(()) => return Ok(cluster),
                Err(e) if attempt < 3 && cluster.lost_a_port() => {
                    tracing::warn!("{e:#}: a port was taken; starting the cluster again on new ports");
                    drop(cluster);
                    let _ = fs::remove_dir_all(dir);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether a node exited because its address was in use.
    fn lost_a_port(&mut self) -> bool {
        self.nodes.iter_mut().any(|n| n.exited() && fs::read_to_string(&n.log_file).is_ok_and(|l| l.contains("address already in use")))
    }

    /// Nodes whose monitoring port is answered by another server (one that took the port,
    /// chosen free, before this node bound it: this node is about to exit, and its healthy
    /// answer must not count). `/varz` names the answering server's client port.
    async fn impostors(&self, http: &reqwest::Client) -> Vec<String> {
        let checks = self.nodes.iter().map(|n| async move {
            let url = format!("{}/varz", n.monitor_url());
            match get_json(http, &url).await {
                Ok(v) if v["port"].as_u64() == Some(u64::from(n.client_port)) => None,
                Ok(v) => Some(format!("{url} (answered by the server with client port {})", v["port"])),
                Err(e) => Some(e),
            }
        });
        futures::future::join_all(checks).await.into_iter().flatten().collect()
    }

    /// Waits until every node answers `/healthz` with 200, or fails naming the laggards.
    pub async fn wait_healthy(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let http = http_client();
        loop {
            if let Some(node) = self.nodes.iter_mut().find_map(|n| n.exited().then_some(&*n)) {
                bail!("nats-server {} exited during start-up; see {}", node.name, node.log_file.display());
            }
            let mut sick = unhealthy(&http, &self.monitor_urls()).await;
            if sick.is_empty() {
                sick = self.impostors(&http).await;
                if sick.is_empty() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!("nodes not healthy after {timeout:?}: {}", sick.join(", "));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::group_tags;

    #[test]
    fn groups_overlap_and_each_holds_size_nodes() {
        assert_eq!(group_tags(0, 3), vec!["g0", "g2"]);
        assert_eq!(group_tags(1, 3), vec!["g0", "g1"]);
        assert_eq!(group_tags(2, 3), vec!["g1", "g2"]);
        for k in 0..5 {
            let members = (0..5).filter(|i| group_tags(*i, 5).contains(&format!("g{k}"))).count();
            assert_eq!(members, 3);
        }
        assert!(group_tags(0, 1).is_empty());
    }
}
