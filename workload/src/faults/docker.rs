//! Node containers as fault targets, through the Docker Engine API (the socket is mounted
//! only by docker-compose.faults.yaml): kill and start again, pause and unpause, a graceful
//! restart, and isolation by disconnecting a container from its network (reconnected with
//! its DNS aliases, so peers find it by service name again). With the nodes' data volumes
//! mounted as well (`<data>/<service>`, docker-compose.faults.yaml), a membership change:
//! the stopped node's data wiped and a new server name written beside it
//! (`<data>/<service>/server-name`), which the node's start script (config/nats/start-node)
//! hands to nats-server.

use crate::config::FaultKind;
use anyhow::Context;
use super::quiet::quiet_asked;
use bollard::container::{InspectContainerOptions, KillContainerOptions, ListContainersOptions, StartContainerOptions};
use bollard::models::EndpointSettings;
use bollard::network::{ConnectNetworkOptions, DisconnectNetworkOptions};
use bollard::Docker;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokio::sync::watch;

/// The file in a node's data volume naming the server it runs as (absent: its service name).
pub const SERVER_NAME_FILE: &str = "server-name";

const PROJECT_LABEL: &str = "com.docker.compose.project";
const SERVICE_LABEL: &str = "com.docker.compose.service";

/// One node's container.
pub struct NodeContainer {
    /// The compose service name (the host name in the client URLs).
    pub service: String,
    /// The name the server runs as: the service name until a membership change renames it.
    pub name: String,
    id: String,
    network: String,
    aliases: Vec<String>,
}

pub struct DockerNodes {
    docker: Docker,
    pub nodes: Vec<NodeContainer>,
    /// Where every node's data volume is mounted (`<data>/<service>`), if anywhere.
    data: Option<PathBuf>,
    /// The cluster's client URLs (for the system account's requests).
    pub servers: Vec<String>,
    /// Each node's monitoring endpoint, in the order of `nodes`.
    pub monitors: Vec<String>,
}

impl DockerNodes {
    /// Split needs a network of its own for the minority; latency needs tc in the node
    /// image. Neither is drawn here. Membership and disk faults need the nodes' data volumes.
    pub fn supports(&self, kind: FaultKind) -> bool {
        match kind {
            FaultKind::Kill | FaultKind::Pause | FaultKind::Restart | FaultKind::Isolate => true,
            FaultKind::Membership | FaultKind::Corrupt | FaultKind::SnapshotRollback => self.data.is_some(),
            FaultKind::Split | FaultKind::Latency | FaultKind::PowerLoss | FaultKind::PowerLossAll => false,
        }
    }

    /// Node `i`'s store (its volume's `jetstream`, the `store_dir` of config/nats), if the
    /// volumes are mounted.
    pub fn store(&self, i: usize) -> Option<PathBuf> {
        self.data.as_ref().map(|d| d.join(&self.nodes[i].service).join("jetstream"))
    }

    /// The containers of `services` (reached at `servers`) in the compose project of the
    /// container this process runs in; `data`: where their data volumes are mounted, each
    /// under its service name.
    pub async fn discover(services: &[String], servers: &[String], monitors: &[String], data: Option<&Path>) -> anyhow::Result<DockerNodes> {
        if let Some(d) = data {
            for service in services {
                anyhow::ensure!(d.join(service).is_dir(), "no data volume of {service} at {}", d.join(service).display());
            }
        }
        let docker = Docker::connect_with_local_defaults()
            .context("no Docker Engine API")?
            .negotiate_version()
            .await
            .context("cannot reach the Docker Engine API: is /var/run/docker.sock mounted (docker-compose.faults.yaml does)?")?;
        let me = std::fs::read_to_string("/etc/hostname").context("cannot read /etc/hostname")?;
        let own = docker.inspect_container(me.trim(), None::<InspectContainerOptions>).await.context("cannot inspect this container: docker faults run inside a compose service")?;
        let project = own
            .config
            .and_then(|c| c.labels)
            .and_then(|l| l.get(PROJECT_LABEL).cloned())
            .context("this container has no compose project label")?;
        let label = format!("{PROJECT_LABEL}={project}");
        let filters = HashMap::from([("label".to_string(), vec![label])]);
        let listed = docker.list_containers(Some(ListContainersOptions::<String> { all: true, filters, ..Default::default() })).await?;
        let mut nodes = Vec::new();
        for service in services {
            let summary = listed
                .iter()
                .find(|c| c.labels.as_ref().and_then(|l| l.get(SERVICE_LABEL)) == Some(service))
                .with_context(|| format!("no container of service {service} in compose project {project}"))?;
            let id = summary.id.clone().context("container without an id")?;
            let inspected = docker.inspect_container(&id, None::<InspectContainerOptions>).await?;
            let networks = inspected.network_settings.and_then(|n| n.networks).unwrap_or_default();
            let (network, endpoint) = networks.into_iter().next().with_context(|| format!("{service} is on no network"))?;
            let mut aliases = endpoint.aliases.unwrap_or_default();
            if !aliases.contains(service) {
                aliases.push(service.clone());
            }
            let name = data.and_then(|d| server_name(&d.join(service))).unwrap_or_else(|| service.clone());
            nodes.push(NodeContainer { service: service.clone(), name, id, network, aliases });
        }
        tracing::info!(project, nodes = ?services, data = ?data, "docker fault injector: node containers found");
        Ok(DockerNodes { docker, nodes, data: data.map(Path::to_path_buf), servers: servers.to_vec(), monitors: monitors.to_vec() })
    }

    /// Kills node `i`'s container and waits until it has stopped.
    pub async fn stop(&self, i: usize) -> Result<(), String> {
        let id = &self.nodes[i].id;
        self.docker.kill_container(id, Some(KillContainerOptions { signal: "SIGKILL" })).await.map_err(|e| e.to_string())?;
        match self.wait_stopped(id, 30).await {
            Ok(true) => Ok(()),
            Ok(false) => Err("still running 30 s after SIGKILL".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A stopped node's new identity: everything in its data volume removed, and the name
    /// `<service>-<n>` written there for its next start. Returns the new name.
    pub fn wipe_and_rename(&mut self, i: usize) -> anyhow::Result<String> {
        let data = self.data.as_ref().context("no data volumes mounted")?;
        let node = &mut self.nodes[i];
        let dir = data.join(&node.service);
        let generation = node.name.rsplit_once('-').and_then(|(_, n)| n.parse::<u32>().ok()).unwrap_or(1);
        let new = format!("{}-{}", node.service, generation + 1);
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() { std::fs::remove_dir_all(&path)? } else { std::fs::remove_file(&path)? }
        }
        std::fs::write(dir.join(SERVER_NAME_FILE), format!("{new}\n"))?;
        node.name = new.clone();
        Ok(new)
    }

    /// Puts a fault in place; what the log should show. `quiet`: a quiet request cuts a
    /// graceful restart short.
    pub async fn apply(&mut self, kind: FaultKind, nodes: &[usize], lame_duck: bool, quiet: Option<watch::Receiver<Option<Instant>>>) -> Value {
        let mut results = Vec::new();
        for &i in nodes {
            let n = &self.nodes[i];
            let r = match kind {
                FaultKind::Kill => self.docker.kill_container(&n.id, Some(KillContainerOptions { signal: "SIGKILL" })).await,
                FaultKind::Pause => self.docker.pause_container(&n.id).await,
                FaultKind::Restart => self.graceful_restart(&n.id, if lame_duck { "SIGUSR2" } else { "SIGTERM" }, quiet.clone()).await,
                FaultKind::Isolate | FaultKind::Split => {
                    let opts = DisconnectNetworkOptions { container: n.id.as_str(), force: true };
                    self.docker.disconnect_network(&n.network, opts).await
                }
                // Not supported here (`supports`): never drawn; membership changes and disk
                // faults are carried out by the injector (stop, then change the volume).
                FaultKind::Latency | FaultKind::Membership | FaultKind::Corrupt | FaultKind::SnapshotRollback | FaultKind::PowerLoss | FaultKind::PowerLossAll => Ok(()),
            };
            results.push(r.err().map(|e| e.to_string()));
        }
        let how = matches!(kind, FaultKind::Restart).then(|| if lame_duck { "lame-duck" } else { "sigterm" });
        json!({ "how": how, "errors": results.into_iter().flatten().collect::<Vec<_>>() })
    }

    /// `signal` (SIGTERM, or SIGUSR2: lame-duck mode, in which the server hands off and
    /// exits by itself after lame_duck_duration, 30 s in config/nats), then a start. A
    /// server still running after 45 s, or when a quiet period is requested, is killed
    /// first, as the local injector does: starting a running container does nothing, and
    /// the server would exit later with nobody to start it again.
    async fn graceful_restart(&self, id: &str, signal: &str, quiet: Option<watch::Receiver<Option<Instant>>>) -> Result<(), bollard::errors::Error> {
        self.docker.kill_container(id, Some(KillContainerOptions { signal })).await?;
        let stopped = tokio::select! {
            stopped = self.wait_stopped(id, 45) => stopped?,
            _ = quiet_asked(quiet) => false,
        };
        if !stopped {
            tracing::info!(container = id, "still running after {signal} (45 s, or a quiet period requested): killed");
            self.docker.kill_container(id, Some(KillContainerOptions { signal: "SIGKILL" })).await?;
            self.wait_stopped(id, 15).await?;
        }
        self.docker.start_container(id, None::<StartContainerOptions<String>>).await
    }

    /// Whether the container stopped running within `secs` seconds.
    async fn wait_stopped(&self, id: &str, secs: u64) -> Result<bool, bollard::errors::Error> {
        for _ in 0..secs {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let state = self.docker.inspect_container(id, None::<InspectContainerOptions>).await?.state;
            if !state.and_then(|s| s.running).unwrap_or(false) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Node containers that are not running although no fault holds them down, each with
    /// what Docker says of it, after starting it again (called when every fault is healed).
    pub async fn start_stopped(&self) -> Vec<Value> {
        let mut found = Vec::new();
        for n in &self.nodes {
            let Ok(inspected) = self.docker.inspect_container(&n.id, None::<InspectContainerOptions>).await else { continue };
            let Some(state) = inspected.state else { continue };
            if state.running == Some(true) {
                continue;
            }
            let started = self.docker.start_container(&n.id, None::<StartContainerOptions<String>>).await;
            found.push(json!({ "node": n.name, "status": format!("{:?}", state.status), "exit_code": state.exit_code,
                               "finished_at": state.finished_at, "oom_killed": state.oom_killed, "error": state.error,
                               "start_error": started.err().map(|e| e.to_string()) }));
        }
        found
    }

    /// Ends a fault: start, unpause or reconnect.
    pub async fn end(&mut self, kind: FaultKind, nodes: &[usize]) -> Value {
        let mut errors = Vec::new();
        for &i in nodes {
            let n = &self.nodes[i];
            let r = match kind {
                FaultKind::Kill | FaultKind::Membership | FaultKind::Corrupt | FaultKind::SnapshotRollback | FaultKind::PowerLoss | FaultKind::PowerLossAll => {
                    self.docker.start_container(&n.id, None::<StartContainerOptions<String>>).await
                }
                FaultKind::Pause => self.docker.unpause_container(&n.id).await,
                FaultKind::Isolate | FaultKind::Split => {
                    let endpoint_config = EndpointSettings { aliases: Some(n.aliases.clone()), ..Default::default() };
                    self.docker.connect_network(&n.network, ConnectNetworkOptions { container: n.id.as_str(), endpoint_config }).await
                }
                FaultKind::Restart | FaultKind::Latency => Ok(()),
            };
            if let Err(e) = r {
                errors.push(e.to_string());
            }
        }
        if errors.is_empty() { Value::Null } else { json!({ "errors": errors }) }
    }
}

/// The server name a node's data volume at `dir` names, if it names one.
fn server_name(dir: &Path) -> Option<String> {
    let name = std::fs::read_to_string(dir.join(SERVER_NAME_FILE)).ok()?;
    Some(name.trim().to_string()).filter(|n| !n.is_empty())
}
